//! Bad input: every malformed thing a bank, a config or a user can hand us gives a clear error
//! or a counted skip — never a panic, never a path outside the bank, never a deletion on doubt.

use banklease_testkit::cid;
use std::io::Write;
use std::path::Path as FsPath;

use banklease::checkpoint::{read_checkpoint, read_decision};
use banklease::config::Config;
use banklease::id::validate_id;
use banklease::lease::read_lease;
use banklease::lease::MAX_LEASE_BYTES;
use banklease::paths::Key;
use banklease::LeaseRecord;
use banklease::{Bank, Error, OwnerId};
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};
use proptest::prelude::*;

fn good_lease() -> serde_json::Value {
    serde_json::json!({
        "format": 1, "owner_id": "owner-1", "host": "h", "pid": 1,
        "renew_window_ms": 100, "expire_window_ms": 400, "validity_window_ms": 50,
        "acquired_at": "2026-01-01T00:00:00Z", "renewed_at": "2026-01-01T00:00:00Z",
        "generation": 1, "token": "t"
    })
}

fn with(field: &str, value: serde_json::Value) -> Vec<u8> {
    let mut v = good_lease();
    v[field] = value;
    serde_json::to_vec(&v).unwrap()
}

fn without(field: &str) -> Vec<u8> {
    let mut v = good_lease();
    v.as_object_mut().unwrap().remove(field);
    serde_json::to_vec(&v).unwrap()
}

/// Malformed lease bodies: each must be refused by the parser with a `Corrupt` error.
fn bad_lease_bodies() -> Vec<(&'static str, Vec<u8>)> {
    let good = serde_json::to_vec(&good_lease()).unwrap();
    vec![
        ("empty", vec![]),
        ("garbage", b"\x00\xff garbage".to_vec()),
        ("truncated", good[..good.len() / 2].to_vec()),
        ("json null", b"null".to_vec()),
        ("json array", b"[1,2,3]".to_vec()),
        ("json string", b"\"lease\"".to_vec()),
        ("json number", b"42".to_vec()),
        ("format as string", with("format", "1".into())),
        ("format negative", with("format", (-1).into())),
        ("future format 2", with("format", 2.into())),
        (
            "future format huge",
            with("format", 4_000_000_000u64.into()),
        ),
        ("owner id number", with("owner_id", 7.into())),
        ("owner id with slash", with("owner_id", "a/b".into())),
        ("owner id dotdot", with("owner_id", "..".into())),
        ("owner id unicode", with("owner_id", "ünï".into())),
        ("owner id NUL", with("owner_id", "a\u{0}b".into())),
        (
            "owner id 10 KB",
            with("owner_id", "a".repeat(10_000).into()),
        ),
        ("pid negative", with("pid", (-5).into())),
        ("pid string", with("pid", "12".into())),
        ("generation negative", with("generation", (-1).into())),
        ("generation float", with("generation", 1.5.into())),
        ("expire window zero", with("expire_window_ms", 0.into())),
        (
            "expire window absurd",
            with("expire_window_ms", u64::MAX.into()),
        ),
        (
            "expire window string",
            with("expire_window_ms", "10s".into()),
        ),
        (
            "acquired_at not a time",
            with("acquired_at", "yesterday".into()),
        ),
        ("renewed_at number", with("renewed_at", 0.into())),
        ("token missing", without("token")),
        ("owner id missing", without("owner_id")),
        ("expire window missing", without("expire_window_ms")),
        ("format missing", without("format")),
    ]
}

#[test]
fn malformed_lease_bodies_are_corrupt_not_panics() {
    let cases = bad_lease_bodies();
    for (name, body) in &cases {
        match LeaseRecord::parse(&Path::from("leases/x"), body) {
            Err(Error::Corrupt { path, reason }) => {
                assert_eq!(path.as_ref(), "leases/x", "{name}");
                assert!(!reason.is_empty(), "{name}");
            }
            other => panic!("{name}: expected a corrupt-record error, got {other:?}"),
        }
    }
    // The future format says what to do.
    let err = LeaseRecord::parse(&Path::from("p"), &with("format", 2.into())).unwrap_err();
    assert!(err.to_string().contains("upgrade banklease"), "{err}");
    // Unknown fields are fine: newer writers of the same format stay readable.
    let mut v = good_lease();
    v["added_in_a_later_release"] = serde_json::json!({"x": 1});
    LeaseRecord::parse(&Path::from("p"), &serde_json::to_vec(&v).unwrap()).unwrap();
}

#[tokio::test]
async fn huge_or_misattributed_lease_objects_are_refused_unread() {
    let bank = Bank::open("memory://").unwrap();
    let owner = OwnerId::parse("owner-1").unwrap();
    let huge = vec![b' '; MAX_LEASE_BYTES as usize + 1];
    bank.store()
        .put(&bank.lease_path(&owner), PutPayload::from(huge))
        .await
        .unwrap();
    let err = read_lease(&bank, &owner).await.unwrap_err();
    assert!(err.to_string().contains("exceeds"), "{err}");
    // A valid body that names another owner is not this owner's lease.
    let other = OwnerId::parse("owner-2").unwrap();
    bank.store()
        .put(
            &bank.lease_path(&other),
            PutPayload::from(serde_json::to_vec(&good_lease()).unwrap()),
        )
        .await
        .unwrap();
    assert!(matches!(
        read_lease(&bank, &other).await,
        Err(Error::Corrupt { .. })
    ));
}

#[tokio::test]
async fn malformed_checkpoint_metadata_and_decisions_are_corrupt() {
    let bank = Bank::open("memory://").unwrap();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("garbage", b"{{{".to_vec()),
        ("unknown status", br#"{"format":1,"id":"cp","owner_id":"o","status":"zombie","created_at":"2026-01-01T00:00:00Z"}"#.to_vec()),
        ("future format", br#"{"format":9,"id":"cp"}"#.to_vec()),
        ("id mismatch", br#"{"format":1,"id":"other","owner_id":"o","status":"protecting","created_at":"2026-01-01T00:00:00Z"}"#.to_vec()),
        ("owner with slash", br#"{"format":1,"id":"cp","owner_id":"a/b","status":"protecting","created_at":"2026-01-01T00:00:00Z"}"#.to_vec()),
        ("huge", vec![b' '; 70_000]),
    ];
    for (name, body) in &cases {
        bank.store()
            .put(
                &Key::Index(cid("cp")).path(&bank),
                PutPayload::from(body.clone()),
            )
            .await
            .unwrap();
        assert!(
            matches!(
                read_checkpoint(&bank, &cid("cp")).await,
                Err(Error::Corrupt { .. })
            ),
            "{name}"
        );
        bank.store()
            .put(
                &Key::Decision(cid("cp")).path(&bank),
                PutPayload::from(body.clone()),
            )
            .await
            .unwrap();
        assert!(read_decision(&bank, &cid("cp")).await.is_err(), "{name}");
    }
    // Missing metadata is not an error: it is absent.
    assert_eq!(
        read_checkpoint(&bank, &cid("nothing-here")).await.unwrap(),
        None
    );
}

#[test]
fn bad_ids_are_refused_everywhere() {
    let long = "x".repeat(10 * 1024);
    let bad = [
        "",
        "/",
        "a/b",
        "..",
        "../etc/passwd",
        ".",
        ".hidden",
        "a\0b",
        "a\nb",
        "\t",
        "a b",
        "ünïcode",
        "emoji😀",
        "a\\b",
        "a:b",
        "a*b",
        "%2F",
        long.as_str(),
    ];
    for id in bad {
        assert!(validate_id("checkpoint", id).is_err(), "{id:?}");
        assert!(OwnerId::parse(id).is_err(), "{id:?}");
    }
}

fn config_file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

#[test]
fn bad_config_files_are_refused_with_a_message() {
    let cases = [
        ("not toml", "this is = = not toml"),
        ("unknown section", "[bank2]\nurl = \"memory://\"\n"),
        ("unknown key", "[lease]\nexpire = \"1s\"\n"),
        ("duration as number", "[lease]\nexpire_window = 10\n"),
        ("bad duration", "[lease]\nexpire_window = \"ten seconds\"\n"),
        ("negative duration", "[lease]\nexpire_window = \"-1s\"\n"),
        ("concurrency string", "[gc]\nconcurrency = \"many\"\n"),
        ("concurrency negative", "[gc]\nconcurrency = -1\n"),
        ("concurrency zero", "[gc]\nconcurrency = 0\n"),
        ("brake ratio above 1", "[gc]\nbrake_ratio = 2.0\n"),
        ("jitter above 0.5", "[lease]\nrenew_jitter = 0.9\n"),
        ("renew >= expire", "[lease]\nrenew_window = \"20m\"\n"),
        ("validity > renew", "[lease]\nvalidity_window = \"3m\"\n"),
        ("section as value", "lease = 3\n"),
        (
            "bad scheme name",
            "[lease]\nowner_id_scheme = \"mac-address\"\n",
        ),
    ];
    for (name, text) in cases {
        let f = config_file(text);
        let err = Config::load_from(Some(f.path()), Vec::new());
        let msg = err.expect_err(name).to_string();
        assert!(msg.starts_with("invalid"), "{name}: {msg}");
    }
    assert!(Config::load_from(Some(FsPath::new("/no/such/file.toml")), Vec::new()).is_err());
}

#[test]
fn bad_bank_urls_are_refused() {
    for url in [
        "",
        " ",
        "file:///",
        "file://",
        "file://remote-host/x",
        "s3://",
        "ftp://x/y",
        "bank",
        "http://127.0.0.1:1/x",
        "memory",
        "/abs/path/without/scheme",
    ] {
        let err = Bank::open(url).expect_err(url);
        assert!(err.to_string().contains("invalid bank url"), "{url}: {err}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn lease_parser_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = LeaseRecord::parse(&Path::from("p"), &bytes);
    }

    #[test]
    fn accepted_ids_are_one_safe_path_segment(id in "\\PC{0,40}") {
        if validate_id("checkpoint", &id).is_ok() {
            prop_assert!(!id.contains('/') && !id.starts_with('.') && !id.is_empty());
            let bank = Bank::open("memory:///p").unwrap();
            let path = bank.path(&["checkpoints", &id]);
            prop_assert_eq!(path.parts().count(), 3);
            prop_assert_eq!(path.as_ref(), format!("p/checkpoints/{id}"));
        }
    }

    #[test]
    fn valid_shaped_ids_are_accepted(id in "[a-zA-Z0-9_-][a-zA-Z0-9._-]{0,127}") {
        prop_assert!(validate_id("owner", &id).is_ok());
    }

    #[test]
    fn status_parser_accepts_only_known(s in "\\PC{0,20}") {
        let known = ["protecting", "available", "error", "deleting", "deleted", "error-deleting"];
        prop_assert_eq!(s.parse::<banklease::Status>().is_ok(), known.contains(&s.as_str()));
    }
}
