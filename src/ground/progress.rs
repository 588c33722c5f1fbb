//! Progress notifications of one request: a ground-floor helper (it knows the MCP peer, no
//! crate type), used by the tools' searches and multi-file changes and by `execute`'s process
//! machinery (`exec`) alike.

/// Sends `notifications/progress` for one request's progress token.
#[derive(Debug, Clone)]
pub struct ProgressReporter {
    token: rmcp::model::ProgressToken,
    peer: rmcp::Peer<rmcp::RoleServer>,
}

impl ProgressReporter {
    /// A reporter sending to `peer` under `token`.
    pub fn new(token: rmcp::model::ProgressToken, peer: rmcp::Peer<rmcp::RoleServer>) -> Self {
        Self { token, peer }
    }

    /// Sends one notification; a client gone away is not the tool's failure.
    pub async fn report(&self, progress: f64, message: String) {
        self.report_of(progress, None, message).await;
    }

    /// [`ProgressReporter::report`] with the total the progress counts towards, when known.
    pub async fn report_of(&self, progress: f64, total: Option<f64>, message: String) {
        let mut param = rmcp::model::ProgressNotificationParam::new(self.token.clone(), progress)
            .with_message(message);
        if let Some(total) = total {
            param = param.with_total(total);
        }
        if let Err(error) = self.peer.notify_progress(param).await {
            tracing::debug!(%error, "progress notification not sent");
        }
    }
}
