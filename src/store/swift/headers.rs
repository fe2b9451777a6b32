//! Reading and writing Swift's headers: dates, timestamps, ranges, attributes.

use std::ops::Range;

use chrono::{DateTime, NaiveDateTime, SubsecRound, Utc};
use http::header::{
    CACHE_CONTROL, CONTENT_DISPOSITION, CONTENT_ENCODING, CONTENT_LANGUAGE, CONTENT_LENGTH,
    CONTENT_RANGE, CONTENT_TYPE, DATE, ETAG, LAST_MODIFIED,
};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use object_store::path::Path;
use object_store::{Attribute, AttributeValue, Attributes, GetRange, ObjectMeta};

use super::error::Error;

/// `X-Timestamp`: the proxy's clock when the write arrived, 10 µs resolution.
pub(crate) const X_TIMESTAMP: HeaderName = HeaderName::from_static("x-timestamp");
/// `X-Delete-At`: expiry, whole epoch seconds.
pub(crate) const X_DELETE_AT: HeaderName = HeaderName::from_static("x-delete-at");
/// `X-Delete-After`: expiry relative to the request, seconds.
pub(crate) const X_DELETE_AFTER: HeaderName = HeaderName::from_static("x-delete-after");
/// `X-Copy-From`: server-side copy source, `/container/object`.
pub(crate) const X_COPY_FROM: HeaderName = HeaderName::from_static("x-copy-from");
/// `X-Newest: true` on an object GET/HEAD: the proxy asks every replica and answers with the
/// one with the newest `X-Timestamp`, instead of the first object server that has the object.
pub(crate) const X_NEWEST: HeaderName = HeaderName::from_static("x-newest");
/// User metadata prefix.
pub(crate) const META_PREFIX: &str = "x-object-meta-";

pub(crate) fn get_str<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// An HTTP date (`Sun, 22 Nov 2026 14:20:11 GMT`).
pub(crate) fn parse_http_date(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc2822(s)
        .ok()
        .map(|d| d.with_timezone(&Utc))
}

/// An HTTP date for a conditional header, **rounded up** to the whole second.
///
/// Swift compares `If-(Un)Modified-Since` with `Last-Modified`, which is the object's
/// `X-Timestamp` rounded up to the second, while this store reports the `X-Timestamp` itself
/// as `last_modified`. Rounding up makes a condition on a reported `last_modified` mean the
/// same as on Swift's own `Last-Modified` (e.g. `if_modified_since(meta.last_modified)` →
/// not modified).
pub(crate) fn http_date_ceil(t: DateTime<Utc>) -> String {
    let whole = t.trunc_subsecs(0);
    let up = if whole < t {
        whole + chrono::Duration::seconds(1)
    } else {
        whole
    };
    up.format("%a, %d %b %Y %H:%M:%S GMT").to_string()
}

/// `X-Timestamp` (`1795357210.86656`, possibly with an `_offset` suffix) or `X-Delete-At`.
pub(crate) fn parse_timestamp(s: &str) -> Option<DateTime<Utc>> {
    let s = s.split('_').next()?.trim();
    let (secs, frac) = s.split_once('.').unwrap_or((s, ""));
    let secs: i64 = secs.parse().ok()?;
    if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let nanos: u32 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<9}").parse().ok()?
    };
    DateTime::<Utc>::from_timestamp(secs, nanos)
}

/// A container listing's `last_modified`: Swift's own (`2026-11-22T14:20:10.866560`, UTC, µs,
/// no zone), or RFC 3339 with a `Z` or an offset (Ceph RGW: `2026-11-28T02:23:31.059Z`).
pub(crate) fn parse_listing_time(s: &str) -> Option<DateTime<Utc>> {
    let s = s.trim();
    NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f")
        .map(|n| n.and_utc())
        .or_else(|_| DateTime::parse_from_rfc3339(s).map(|t| t.with_timezone(&Utc)))
        .ok()
}

/// `bytes 2-13/14` → (2..14, 14).
pub(crate) fn parse_content_range(s: &str) -> Option<(Range<u64>, u64)> {
    let rest = s.trim().strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let (start, end) = range.split_once('-')?;
    let (start, end, total): (u64, u64, u64) =
        (start.parse().ok()?, end.parse().ok()?, total.parse().ok()?);
    (start <= end && end < total).then_some((start..end + 1, total))
}

/// What a successful GET/HEAD tells about the object.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) meta: ObjectMeta,
    pub(crate) range: Range<u64>,
    pub(crate) attributes: Attributes,
}

/// Read an object's metadata from the headers of a 200/206 answer.
///
/// `last_modified` is `X-Timestamp` when present (10 µs), else `Last-Modified` (1 s).
pub(crate) fn answer(
    location: &Path,
    method: &Method,
    status: StatusCode,
    headers: &HeaderMap,
    requested: Option<&GetRange>,
) -> Result<Answer, Error> {
    let invalid = |name: &'static str, reason: &str| Error::InvalidHeader {
        method: method.clone(),
        path: location.to_string(),
        name,
        reason: reason.to_owned(),
    };
    let length: u64 = get_str(headers, &CONTENT_LENGTH)
        .ok_or_else(|| invalid("Content-Length", "missing"))?
        .parse()
        .map_err(|_| invalid("Content-Length", "not a number"))?;
    let (range, size) = if status == StatusCode::PARTIAL_CONTENT {
        get_str(headers, &CONTENT_RANGE)
            .and_then(parse_content_range)
            .ok_or_else(|| invalid("Content-Range", "missing or not `bytes a-b/n`"))?
    } else {
        (0..length, length)
    };
    if status == StatusCode::OK {
        if let Some(r) = requested {
            // Swift answers 200 when the range covers the whole object; anything else means
            // the range was ignored and the body is not what was asked for.
            if r.as_range(size).ok() != Some(0..size) {
                return Err(Error::RangeIgnored {
                    path: location.to_string(),
                });
            }
        }
    }
    let last_modified = get_str(headers, &X_TIMESTAMP)
        .and_then(parse_timestamp)
        .or_else(|| get_str(headers, &LAST_MODIFIED).and_then(parse_http_date))
        .ok_or_else(|| invalid("X-Timestamp/Last-Modified", "missing or unparseable"))?;
    Ok(Answer {
        meta: ObjectMeta {
            location: location.clone(),
            last_modified,
            size,
            e_tag: get_str(headers, &ETAG).map(str::to_owned),
            version: None,
        },
        range,
        attributes: attributes_from(headers),
    })
}

/// The server's `Date`, present on every Swift answer (errors included).
pub(crate) fn date(headers: &HeaderMap) -> Option<DateTime<Utc>> {
    get_str(headers, &DATE).and_then(parse_http_date)
}

/// `Last-Modified` as sent (whole seconds, rounded up from `X-Timestamp`).
pub(crate) fn last_modified(headers: &HeaderMap) -> Option<DateTime<Utc>> {
    get_str(headers, &LAST_MODIFIED).and_then(parse_http_date)
}

/// The standard content headers Swift stores, with their object_store attribute.
const CONTENT_ATTRIBUTES: [(Attribute, HeaderName); 5] = [
    (Attribute::CacheControl, CACHE_CONTROL),
    (Attribute::ContentDisposition, CONTENT_DISPOSITION),
    (Attribute::ContentEncoding, CONTENT_ENCODING),
    (Attribute::ContentLanguage, CONTENT_LANGUAGE),
    (Attribute::ContentType, CONTENT_TYPE),
];

fn attributes_from(headers: &HeaderMap) -> Attributes {
    let mut attributes = Attributes::new();
    for (attribute, name) in CONTENT_ATTRIBUTES {
        if let Some(v) = get_str(headers, &name) {
            attributes.insert(attribute, AttributeValue::from(v.to_owned()));
        }
    }
    for (name, value) in user_metadata(headers) {
        attributes.insert(Attribute::Metadata(name.into()), value.into());
    }
    attributes
}

/// `X-Object-Meta-*` as lowercase `(name, value)` pairs, sorted by name.
pub(crate) fn user_metadata(headers: &HeaderMap) -> Vec<(String, String)> {
    let mut meta: Vec<(String, String)> = headers
        .iter()
        .filter_map(|(k, v)| {
            let name = k.as_str().strip_prefix(META_PREFIX)?;
            Some((name.to_owned(), v.to_str().ok()?.to_owned()))
        })
        .collect();
    meta.sort();
    meta
}

/// Headers for a PUT's attributes, or the reason they cannot be stored faithfully.
///
/// Swift stores the five content headers and `X-Object-Meta-<name>` user metadata, but header
/// names come back title-cased and with `_` turned into `-`, so only names of lowercase ASCII
/// letters, digits and `-` round-trip; others are refused rather than silently renamed.
pub(crate) fn attribute_headers(attributes: &Attributes) -> Result<HeaderMap, String> {
    let mut headers = HeaderMap::new();
    for (attribute, value) in attributes {
        let value = HeaderValue::from_str(value.as_ref()).map_err(|_| {
            format!("attribute {attribute:?} has a value that is not a valid header")
        })?;
        let name = match attribute {
            Attribute::Metadata(key) => {
                let ok = !key.is_empty()
                    && key
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
                if !ok {
                    return Err(format!(
                        "metadata key `{key}`: Swift returns header names title-cased and with \
                         `_` as `-`, so only lowercase ASCII letters, digits and `-` round-trip"
                    ));
                }
                HeaderName::from_bytes(format!("{META_PREFIX}{key}").as_bytes())
                    .map_err(|_| format!("metadata key `{key}` is not a valid header name"))?
            }
            other => CONTENT_ATTRIBUTES
                .iter()
                .find(|(a, _)| a == other)
                .map(|(_, h)| h.clone())
                .ok_or_else(|| format!("attribute {other:?} has no Swift equivalent"))?,
        };
        headers.insert(name, value);
    }
    Ok(headers)
}

/// The headers of a source object that a client-side copy carries over, as Swift's server-side
/// copy does (content headers, user metadata, `X-Delete-At`), plus its ETag so that Swift
/// verifies the copied bytes.
pub(crate) fn copied_headers(source: &HeaderMap) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in source {
        let n = name.as_str();
        let carried = CONTENT_ATTRIBUTES.iter().any(|(_, h)| h == name)
            || n.starts_with(META_PREFIX)
            || name == X_DELETE_AT
            || name == ETAG;
        if carried {
            headers.insert(name.clone(), value.clone());
        }
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_keep_their_precision() {
        let t = parse_timestamp("1795357210.86656").unwrap();
        assert_eq!(t.timestamp(), 1_795_357_210);
        assert_eq!(t.timestamp_subsec_micros(), 866_560);
        assert_eq!(
            parse_timestamp("1795357210.86656_0000000000000001"),
            Some(t)
        );
        assert_eq!(
            parse_timestamp("1795357212").unwrap().timestamp(),
            1_795_357_212
        );
        assert_eq!(parse_timestamp("x"), None);
        assert_eq!(parse_timestamp("1.1234567890"), None);
    }

    #[test]
    fn http_dates_parse_and_conditions_round_up() {
        let d = parse_http_date("Sun, 22 Nov 2026 14:20:11 GMT").unwrap();
        assert_eq!(d.timestamp(), 1_795_357_211);
        let t = parse_timestamp("1795357210.86656").unwrap();
        // Swift's Last-Modified for this X-Timestamp is 14:20:11: the condition names it.
        assert_eq!(http_date_ceil(t), "Sun, 22 Nov 2026 14:20:11 GMT");
        assert_eq!(http_date_ceil(d), "Sun, 22 Nov 2026 14:20:11 GMT");
    }

    #[test]
    fn listing_times_and_content_ranges_parse() {
        let t = parse_listing_time("2026-11-22T14:20:10.866560").unwrap();
        assert_eq!(t, parse_timestamp("1795357210.86656").unwrap());
        assert_eq!(parse_content_range("bytes 2-13/14"), Some((2..14, 14)));
        assert_eq!(parse_content_range("bytes 2-14/14"), None);
        assert_eq!(parse_content_range("bytes */14"), None);
    }

    /// Ceph RGW's Swift API lists times as RFC 3339 (milliseconds and a `Z`); other gateways
    /// may give an offset or no fraction. Every form names the same instant; anything else is
    /// still refused.
    #[test]
    fn listing_times_of_every_gateway_parse() {
        let at = |s: &str| parse_listing_time(s).unwrap_or_else(|| panic!("{s}"));
        let swift = at("2026-11-28T02:23:31.059000");
        assert_eq!(at("2026-11-28T02:23:31.059Z"), swift, "RGW");
        assert_eq!(at("2026-11-28T02:23:31.059+00:00"), swift);
        assert_eq!(at("2026-11-28T03:23:31.059+01:00"), swift, "an offset");
        assert_eq!(
            at("2026-11-28T02:23:31Z"),
            at("2026-11-28T02:23:31"),
            "no fraction"
        );
        for bad in ["", "2026-11-28", "yesterday", "2026-11-28T02:23:31.059Q"] {
            assert_eq!(parse_listing_time(bad), None, "{bad}");
        }
    }

    #[test]
    fn only_round_tripping_attributes_are_accepted() {
        let ok = Attributes::from_iter([
            (Attribute::ContentType, "text/plain"),
            (Attribute::Metadata("owner-id".into()), "abc"),
        ]);
        let h = attribute_headers(&ok).unwrap();
        assert_eq!(h["content-type"], "text/plain");
        assert_eq!(h["x-object-meta-owner-id"], "abc");
        assert_eq!(user_metadata(&h), vec![("owner-id".into(), "abc".into())]);
        for bad in [
            Attributes::from_iter([(Attribute::Metadata("test_key".into()), "v")]),
            Attributes::from_iter([(Attribute::Metadata("Upper".into()), "v")]),
            Attributes::from_iter([(Attribute::StorageClass, "GLACIER")]),
        ] {
            assert!(attribute_headers(&bad).is_err(), "{bad:?}");
        }
    }
}
