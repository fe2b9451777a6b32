//! Bulk delete: Swift's `bulk` middleware deletes up to `max_deletes_per_request` objects
//! (10,000 by default) in one `POST /v1/<account>?bulk-delete`, whose body lists
//! `/<container>/<object>` one per line. Where the cluster does not advertise it in `GET /info`,
//! every object is deleted with its own `DELETE`.

use futures::stream::{self, BoxStream, StreamExt};
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{HeaderValue, Method, StatusCode};
use object_store::path::Path;
use object_store::{PutPayload, Result};

use super::client::{Request, SwiftClient, Target};
use super::error::Error;
use super::SwiftStore;

/// Most locations gathered from the incoming stream into one batch.
const GATHER: usize = 10_000;

/// Most objects per bulk-delete request, whatever the cluster allows: the proxy deletes them
/// one by one before it answers, and the answer must come within the client's timeout (30 s by
/// default). On the 3-replica test cluster 1,000 in one request outlasted it; 200 take a few
/// seconds. A request that fails as a whole is done again one object at a time.
const BULK_CHUNK: usize = 200;

/// Swift's documented default of `max_deletes_per_request` (the `bulk` middleware's), for a
/// cluster that advertises bulk delete without its limits (Ceph RGW: `"bulk_delete": {}`).
const DEFAULT_MAX_DELETES_PER_REQUEST: u64 = 10_000;

/// Objects per bulk-delete request a cluster's `/info` allows: its `max_deletes_per_request`,
/// the documented default where it advertises `bulk_delete` without one, 0 where it does not
/// advertise it.
fn limit_from_info(info: Option<&serde_json::Value>) -> u64 {
    match info.and_then(|i| i.get("bulk_delete")) {
        Some(bulk) if bulk.is_object() => bulk
            .get("max_deletes_per_request")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(DEFAULT_MAX_DELETES_PER_REQUEST),
        _ => 0,
    }
}

impl SwiftStore {
    /// Objects per bulk-delete request, or 0 when the cluster offers none. Asked once; a
    /// failed `/info` is not remembered (per-object deletes this time, asked again next time).
    pub async fn bulk_delete_limit(&self) -> usize {
        let client = &self.client;
        let limit = client
            .bulk_delete_limit
            .get_or_try_init(|| async {
                let info = client.info().await?;
                let limit = limit_from_info(info.as_ref());
                tracing::debug!(limit, "swift bulk delete");
                Ok::<_, Error>(usize::try_from(limit).unwrap_or(usize::MAX))
            })
            .await;
        match limit {
            Ok(l) => *l,
            Err(e) => {
                tracing::debug!(error = %e, "swift /info unreadable; deleting one object at a time");
                0
            }
        }
    }

    /// `delete_stream`: gather what is ready (up to 10,000), delete it in bulk where the
    /// cluster can, else one request per object; each location's outcome is reported.
    pub(crate) fn delete_many(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let store = self.clone();
        locations
            .ready_chunks(GATHER)
            .map(move |batch| {
                let store = store.clone();
                store.delete_batch(batch)
            })
            .buffered(2)
            .flat_map(stream::iter)
            .boxed()
    }

    async fn delete_batch(self, batch: Vec<Result<Path>>) -> Vec<Result<Path>> {
        let paths: Vec<Path> = batch
            .iter()
            .filter_map(|r| r.as_ref().ok().cloned())
            .collect();
        let limit = if paths.len() > 1 {
            self.bulk_delete_limit().await
        } else {
            0
        };
        let mut outcomes = std::collections::HashMap::new();
        if limit > 1 {
            for chunk in paths.chunks(limit.min(BULK_CHUNK)) {
                match bulk_delete(&self.client, chunk).await {
                    Ok(each) => {
                        for (path, outcome) in chunk.iter().zip(each) {
                            outcomes.insert(path.clone(), outcome);
                        }
                    }
                    Err(why) => {
                        // Which of them went is unknown: delete each (a 404 counts as gone).
                        tracing::debug!(error = %why, objects = chunk.len(),
                            "swift bulk delete failed as a whole; deleting one at a time");
                        for path in chunk {
                            let r = match Self::delete_one(&self.client, path).await {
                                Err(object_store::Error::NotFound { .. }) => Ok(()),
                                r => r,
                            };
                            outcomes.insert(path.clone(), r);
                        }
                    }
                }
            }
        } else {
            let results: Vec<_> = stream::iter(paths)
                .map(|p| {
                    let client = std::sync::Arc::clone(&self.client);
                    async move {
                        let r = Self::delete_one(&client, &p).await;
                        (p, r)
                    }
                })
                .buffered(10)
                .collect()
                .await;
            outcomes.extend(results);
        }
        batch
            .into_iter()
            .map(|r| {
                let path = r?;
                match outcomes.remove(&path) {
                    Some(Ok(())) | None => Ok(path),
                    Some(Err(e)) => Err(e),
                }
            })
            .collect()
    }
}

/// One bulk-delete request for `paths` (at most the cluster's limit); one outcome per path, or
/// why the request failed as a whole. Objects already gone count as deleted (Swift reports them
/// only as a number).
async fn bulk_delete(
    client: &SwiftClient,
    paths: &[Path],
) -> std::result::Result<Vec<Result<()>>, String> {
    let body: String = paths.iter().map(|p| client.copy_source(p) + "\n").collect();
    let req = Request::new(Method::POST, Target::Account)
        .query("bulk-delete", String::new())
        .header(CONTENT_TYPE, HeaderValue::from_static("text/plain"))
        .header(ACCEPT, HeaderValue::from_static("application/json"))
        .body(PutPayload::from(body));
    let response = client
        .send(&req)
        .await
        .map_err(|e| format!("bulk delete failed: {e}"))?;
    if !response.status().is_success() {
        let e = client
            .status_error(&req.method, "?bulk-delete", response)
            .await;
        return Err(e.to_string());
    }
    let body = response
        .into_body()
        .bytes()
        .await
        .map_err(|e| format!("bulk delete: reading the answer failed: {e}"))?;
    // The middleware may send whitespace to keep the connection open before the JSON.
    let answer: serde_json::Value = serde_json::from_slice(body.trim_ascii())
        .map_err(|e| format!("bulk delete: unreadable answer ({e}): {}", snippet(&body)))?;
    let status = answer
        .get("Response Status")
        .and_then(|s| s.as_str())
        .unwrap_or("");
    let errors: std::collections::HashMap<String, String> = answer
        .get("Errors")
        .and_then(|e| e.as_array())
        .into_iter()
        .flatten()
        .filter_map(|pair| {
            let pair = pair.as_array()?;
            Some((
                pair.first()?.as_str()?.to_owned(),
                pair.get(1)?.as_str()?.to_owned(),
            ))
        })
        .collect();
    if !status.starts_with('2') && errors.is_empty() {
        // The whole request failed (too many objects, a bad body): nothing is known deleted.
        return Err(format!(
            "bulk delete answered `{status}`: {}",
            snippet(&body)
        ));
    }
    Ok(paths
        .iter()
        .map(|p| {
            let line = client.copy_source(p);
            // Swift names the failed object as sent, or decoded: match either.
            let decoded = percent_decode(&line);
            match errors.get(&line).or_else(|| errors.get(&decoded)) {
                None => Ok(()),
                Some(why) if why.starts_with("404") => Ok(()),
                Some(why) => Err(Error::Status {
                    method: Method::DELETE,
                    path: p.to_string(),
                    status: why
                        .get(..3)
                        .and_then(|c| c.parse::<u16>().ok())
                        .and_then(|c| StatusCode::from_u16(c).ok())
                        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                    body: format!("bulk delete: {why}"),
                    hint: "",
                }
                .into()),
            }
        })
        .collect())
}

fn snippet(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned()
}

fn percent_decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("x={}", s.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| s.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ceph RGW advertises `"bulk_delete": {}`: bulk delete with Swift's default limits.
    #[test]
    fn a_cluster_advertising_bulk_delete_without_limits_gets_the_documented_defaults() {
        let info = |v: serde_json::Value| limit_from_info(Some(&v));
        assert_eq!(info(serde_json::json!({"bulk_delete": {}})), 10_000);
        assert_eq!(
            info(serde_json::json!({"bulk_delete": {"max_deletes_per_request": 500}})),
            500
        );
        assert_eq!(info(serde_json::json!({"swift": {}})), 0);
        assert_eq!(info(serde_json::json!({"bulk_delete": true})), 0);
        assert_eq!(limit_from_info(None), 0);
    }
}
