//! Container listings: JSON format, paged by `marker`, optionally with delimiter `/`.
//!
//! object_store prefixes are whole path segments (`foo` matches `foo/x`, not `foo.bar/y`), so a
//! prefix `p` is sent to Swift as the string prefix `p/`. Swift sorts names by their UTF-8
//! bytes, which is also the order of object_store's [`Path`].

use std::sync::Arc;

use futures::stream::{self, BoxStream};
use futures::{StreamExt, TryStreamExt};
use http::{Extensions, Method, StatusCode};
use object_store::path::Path;
use object_store::{ListResult, ObjectMeta};
use serde::Deserialize;

use super::client::{Request, SwiftClient, Target};
use super::error::Error;
use super::headers::parse_listing_time;

/// One entry of a JSON listing.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Entry {
    /// A common prefix (with its trailing `/`), only when listing with a delimiter.
    Subdir { subdir: String },
    Object {
        name: String,
        bytes: u64,
        hash: Option<String>,
        last_modified: String,
    },
}

impl Entry {
    fn name(&self) -> &str {
        match self {
            Self::Subdir { subdir } => subdir,
            Self::Object { name, .. } => name,
        }
    }
}

/// The Swift string prefix for an object_store prefix.
fn swift_prefix(prefix: Option<&Path>) -> String {
    match prefix.map(|p| p.as_ref()) {
        None | Some("") => String::new(),
        Some(p) => format!("{p}/"),
    }
}

fn parse_path(client: &SwiftClient, name: &str) -> Result<Path, Error> {
    Path::parse(name).map_err(|source| Error::InvalidName {
        container: client.container.clone(),
        name: name.to_owned(),
        source,
    })
}

fn object_meta(client: &SwiftClient, entry: Entry) -> Result<Option<ObjectMeta>, Error> {
    let Entry::Object {
        name,
        bytes,
        hash,
        last_modified,
    } = entry
    else {
        return Ok(None);
    };
    let location = parse_path(client, &name)?;
    let last_modified = parse_listing_time(&last_modified).ok_or_else(|| Error::InvalidHeader {
        method: Method::GET,
        path: name.clone(),
        name: "last_modified (listing)",
        reason: format!("`{last_modified}` is not a timestamp"),
    })?;
    Ok(Some(ObjectMeta {
        location,
        last_modified,
        size: bytes,
        e_tag: hash,
        version: None,
    }))
}

/// One page of the listing after `marker`.
async fn page(
    client: &SwiftClient,
    prefix: &str,
    marker: Option<&str>,
    delimiter: bool,
) -> Result<(Vec<Entry>, Extensions), Error> {
    let mut req = Request::new(Method::GET, Target::Container)
        .query("format", "json")
        .query("limit", client.list_limit.to_string());
    if !prefix.is_empty() {
        req = req.query("prefix", prefix);
    }
    if let Some(m) = marker {
        req = req.query("marker", m);
    }
    if delimiter {
        req = req.query("delimiter", "/");
    }
    let response = client.send(&req).await?;
    match response.status() {
        StatusCode::OK => {}
        // Old Swift answers an empty listing with 204.
        StatusCode::NO_CONTENT => return Ok((Vec::new(), response.into_parts().0.extensions)),
        StatusCode::NOT_FOUND => {
            return Err(Error::ContainerNotFound {
                container: client.container.clone(),
                method: Method::GET,
            })
        }
        _ => return Err(client.status_error(&req.method, "", response).await),
    }
    let (parts, body) = response.into_parts();
    let body = body.bytes().await.map_err(|source| Error::Body {
        method: Method::GET,
        path: prefix.to_owned(),
        source,
    })?;
    let entries = serde_json::from_slice(&body).map_err(|source| Error::InvalidListing {
        container: client.container.clone(),
        source,
    })?;
    Ok((entries, parts.extensions))
}

/// The marker for the next page, if this page was full.
fn next_marker(client: &SwiftClient, entries: &[Entry]) -> Option<String> {
    (entries.len() >= client.list_limit)
        .then(|| entries.last().map(|e| e.name().to_owned()))
        .flatten()
}

/// Every object under `prefix` whose name sorts after `offset`, page by page (lazily).
pub(crate) fn objects(
    client: Arc<SwiftClient>,
    prefix: Option<&Path>,
    offset: Option<&Path>,
) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
    let prefix = swift_prefix(prefix);
    let start: Option<Option<String>> = Some(offset.map(|o| o.as_ref().to_owned()));
    stream::try_unfold(start, move |state| {
        let client = Arc::clone(&client);
        let prefix = prefix.clone();
        async move {
            let Some(marker) = state else {
                return Ok(None);
            };
            let (entries, _) = page(&client, &prefix, marker.as_deref(), false).await?;
            let next = next_marker(&client, &entries).map(Some);
            let metas = entries
                .into_iter()
                .filter_map(|e| object_meta(&client, e).transpose())
                .collect::<Result<Vec<_>, Error>>()?;
            let items = stream::iter(metas.into_iter().map(Ok::<_, object_store::Error>));
            Ok::<_, object_store::Error>(Some((items, next)))
        }
    })
    .try_flatten()
    .boxed()
}

/// Objects and common prefixes directly under `prefix`.
pub(crate) async fn with_delimiter(
    client: &SwiftClient,
    prefix: Option<&Path>,
) -> Result<ListResult, Error> {
    let prefix = swift_prefix(prefix);
    let mut result = ListResult {
        common_prefixes: Vec::new(),
        objects: Vec::new(),
        extensions: Extensions::new(),
    };
    let mut marker: Option<String> = None;
    loop {
        let (entries, extensions) = page(client, &prefix, marker.as_deref(), true).await?;
        result.extensions = extensions;
        let next = next_marker(client, &entries);
        for entry in entries {
            match entry {
                Entry::Subdir { subdir } => {
                    let name = subdir.strip_suffix('/').unwrap_or(&subdir);
                    result.common_prefixes.push(parse_path(client, name)?);
                }
                object => result.objects.extend(object_meta(client, object)?),
            }
        }
        match next {
            Some(m) => marker = Some(m),
            None => return Ok(result),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_whole_segments() {
        assert_eq!(swift_prefix(None), "");
        assert_eq!(swift_prefix(Some(&Path::from("/"))), "");
        assert_eq!(swift_prefix(Some(&Path::from("a/b"))), "a/b/");
    }

    #[test]
    fn listing_entries_parse() {
        let entries: Vec<Entry> = serde_json::from_str(
            r#"[{"subdir": "a/"}, {"bytes": 5, "hash": "5d41", "name": "a/b%2Fc",
                "content_type": "x", "last_modified": "2026-11-22T14:20:10.866560"}]"#,
        )
        .unwrap();
        assert!(matches!(&entries[0], Entry::Subdir { subdir } if subdir == "a/"));
        assert!(matches!(&entries[1], Entry::Object { name, bytes: 5, .. } if name == "a/b%2Fc"));
    }
}
