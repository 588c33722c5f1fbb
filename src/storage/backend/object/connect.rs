//! The client of one object mount: an `object_store` store for the mount's cloud, configured
//! from the cloud's standard environment (`AWS_*`, `GOOGLE_*`, `AZURE_*`: credentials, and an
//! endpoint or region when the mount spec gives none) and the spec's few options. Nothing here
//! talks to the network: building never fails on an unreachable endpoint or wrong credentials,
//! which surface on the mount's calls as the mount being unavailable, while the other mounts
//! serve (CONTRACT §3, as a PostgreSQL mount that is down).
//!
//! Retries are bounded (issue 44: throttling is retried with backoff, bounded), so a call on a
//! mount whose endpoint is down fails in seconds, not after `object_store`'s default 3 minutes.
//! The S3 client sends `If-Match` / `If-None-Match: *` on conditional puts
//! ([`S3ConditionalPut::ETagMatch`], set explicitly rather than trusting a default).

use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey, S3ConditionalPut};
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::{ClientConfigKey, ObjectStore, RetryConfig};

use crate::ground::config::{ObjectCloud, ObjectSpec};

/// Retries of one request (throttling, 5xx, broken connections) before the call fails.
pub(super) const MAX_RETRIES: usize = 3;
/// The most time one request spends being retried.
const RETRY_TIMEOUT: Duration = Duration::from_secs(15);
/// The most time one S3 request may take, body included (object_store's default is 30 s). A
/// `CompleteMultipartUpload` of a big object answers only once the store has joined the parts,
/// which AWS documents may take minutes: at 30 s the client gave up on the completion of a
/// 1 GiB `mountfs cp` into moto, which then landed while the copy reported nothing written.
/// Connecting stays bounded by the client's 5 s connect timeout, so a down endpoint still
/// fails in seconds.
const S3_REQUEST_TIMEOUT: &str = "10 minutes";

/// The bounded retries of every object mount.
pub fn retry_config() -> RetryConfig {
    RetryConfig {
        max_retries: MAX_RETRIES,
        retry_timeout: RETRY_TIMEOUT,
        ..RetryConfig::default()
    }
}

/// The S3 client of `spec` on top of `base` (the environment's settings, or a test's): the
/// bucket, the spec's endpoint, region and `allow_http`, conditional puts, bounded retries.
pub fn s3_builder(base: AmazonS3Builder, spec: &ObjectSpec) -> AmazonS3Builder {
    let mut builder = base
        .with_bucket_name(&spec.bucket)
        .with_conditional_put(S3ConditionalPut::ETagMatch)
        .with_retry(retry_config())
        .with_config(
            AmazonS3ConfigKey::Client(ClientConfigKey::Timeout),
            S3_REQUEST_TIMEOUT,
        );
    if let Some(endpoint) = &spec.endpoint {
        builder = builder.with_endpoint(endpoint);
    }
    if let Some(region) = &spec.region {
        builder = builder.with_region(region);
    }
    if spec.allow_http {
        builder = builder.with_allow_http(true);
    }
    builder
}

/// Builds the client of `spec` from the environment. The error says what is missing (a
/// configuration the builder refuses), never a credential's value.
pub fn connect(spec: &ObjectSpec) -> Result<Arc<dyn ObjectStore>, String> {
    let built: Result<Arc<dyn ObjectStore>, object_store::Error> = match spec.cloud {
        ObjectCloud::S3 => s3_builder(AmazonS3Builder::from_env(), spec)
            .build()
            .map(|s| Arc::new(s) as Arc<dyn ObjectStore>),
        ObjectCloud::Gcs => {
            if spec.endpoint.is_some() || spec.region.is_some() || spec.allow_http {
                return Err(
                    "endpoint=, region= and allow_http are for s3:// and az:// mounts; a gs:// mount takes its settings from GOOGLE_* variables".into(),
                );
            }
            GoogleCloudStorageBuilder::from_env()
                .with_bucket_name(&spec.bucket)
                .with_retry(retry_config())
                .build()
                .map(|s| Arc::new(s) as Arc<dyn ObjectStore>)
        }
        ObjectCloud::Azure => {
            let mut builder = MicrosoftAzureBuilder::from_env()
                .with_container_name(&spec.bucket)
                .with_retry(retry_config());
            if let Some(endpoint) = &spec.endpoint {
                builder = builder.with_endpoint(endpoint.clone());
            }
            if spec.allow_http {
                builder = builder.with_allow_http(true);
            }
            builder.build().map(|s| Arc::new(s) as Arc<dyn ObjectStore>)
        }
    };
    built.map_err(|e| {
        format!(
            "cannot configure {}: {}",
            spec.url(),
            e.to_string()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        )
    })
}
