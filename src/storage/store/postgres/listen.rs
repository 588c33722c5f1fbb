//! The PostgreSQL store's change feed: a `LISTEN` on the channel its items table's trigger
//! notifies (see `migrations`), each payload turned into the virtual paths of every mount of
//! its namespace, for the change notifications (`observers::changes`); reconnects after failures.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::ground::path::VirtualPath;

/// The channel the items table's trigger notifies.
pub const POSTGRES_CHANNEL: &str = "mountfs_changes";

/// Listens on [`POSTGRES_CHANNEL`] of the server at `url` until `stop`, publishing the changes
/// of the namespaces in `targets` under their mount prefixes; reconnects after failures.
pub async fn listen(
    url: String,
    targets: Vec<(VirtualPath, String)>,
    changed: impl Fn(VirtualPath, bool) + Send + Sync,
    stop: CancellationToken,
) {
    let mut backoff = Duration::from_millis(200);
    loop {
        let session = listen_once(&url, &targets, &changed);
        tokio::select! {
            () = stop.cancelled() => return,
            outcome = session => {
                if let Err(error) = outcome {
                    tracing::warn!(%error, "PostgreSQL change listener failed; reconnecting");
                }
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(10));
    }
}

async fn listen_once(
    url: &str,
    targets: &[(VirtualPath, String)],
    changed: &(impl Fn(VirtualPath, bool) + Send + Sync),
) -> Result<(), tokio_postgres::Error> {
    let (client, mut connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    let (messages, mut incoming) = tokio::sync::mpsc::unbounded_channel();
    // The connection must be polled for the LISTEN to run and for notifications to arrive.
    let driver = tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(message)) => {
                    if messages.send(message).is_err() {
                        return;
                    }
                }
                Some(Err(error)) => {
                    tracing::warn!(%error, "PostgreSQL change listener connection failed");
                    return;
                }
                None => return,
            }
        }
    });
    client
        .batch_execute(&format!("LISTEN {POSTGRES_CHANNEL}"))
        .await?;
    tracing::debug!("listening for PostgreSQL changes");
    while let Some(message) = incoming.recv().await {
        if let tokio_postgres::AsyncMessage::Notification(notification) = message
            && let Some(change) = change_of_payload(notification.payload(), targets)
        {
            for (path, listing) in change {
                changed(path, listing);
            }
        }
    }
    driver.abort();
    Ok(())
}

/// The changes a trigger payload `namespace\tkind\tkey` stands for, one per mount of that
/// namespace: the path under the mount, and whether a listing changed (an item created or
/// removed) rather than a content.
fn change_of_payload(
    payload: &str,
    targets: &[(VirtualPath, String)],
) -> Option<Vec<(VirtualPath, bool)>> {
    let mut parts = payload.splitn(3, '\t');
    let (namespace, kind, key) = (parts.next()?, parts.next()?, parts.next()?);
    let inner = VirtualPath::parse_raw(key).ok()?;
    let changes = targets
        .iter()
        .filter(|(_, ns)| ns == namespace)
        .map(|(prefix, _)| (inner.under(prefix), kind != "modified"))
        .collect();
    Some(changes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(text: &str) -> VirtualPath {
        VirtualPath::parse(text).unwrap()
    }

    #[test]
    fn postgres_payloads_map_to_every_mount_of_the_namespace() {
        let targets = vec![
            (path("/shared"), "team".to_owned()),
            (path("/mirror"), "team".to_owned()),
            (path("/other"), "solo".to_owned()),
        ];
        let changes = change_of_payload("team\tmodified\t/a/b.md", &targets).expect("parses");
        let paths: Vec<&VirtualPath> = changes.iter().map(|(path, _)| path).collect();
        assert_eq!(paths, [&path("/shared/a/b.md"), &path("/mirror/a/b.md")]);
        assert!(!changes[0].1);
        let created = change_of_payload("team\tcreated\t/n.md", &targets).expect("parses");
        assert!(created[0].1);
        assert_eq!(change_of_payload("garbage", &targets), None);
    }
}
