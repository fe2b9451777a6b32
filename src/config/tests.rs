use super::*;
use std::io::Write;

fn file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

fn no_env() -> Vec<(String, String)> {
    Vec::new()
}

#[test]
fn a_skew_margin_no_observer_can_judge_under_is_warned_about() {
    let env = |margin: &str| {
        vec![
            (
                "BANKLEASE_LEASE__RENEW_WINDOW".to_owned(),
                "300ms".to_owned(),
            ),
            ("BANKLEASE_LEASE__EXPIRE_WINDOW".to_owned(), "2s".to_owned()),
            (
                "BANKLEASE_LEASE__VALIDITY_WINDOW".to_owned(),
                "100ms".to_owned(),
            ),
            ("BANKLEASE_LEASE__SKEW_MARGIN".to_owned(), margin.to_owned()),
        ]
    };
    let c = Config::load_from(None, env("2s")).unwrap();
    let warnings = c.validate().unwrap();
    assert!(
        warnings.iter().any(|w| w.contains("lease.skew_margin=`2s`")
            && w.contains("expire_window − validity_window=`1s 900ms`")),
        "{warnings:?}"
    );
    let c = Config::load_from(None, env("500ms")).unwrap();
    assert!(c
        .validate()
        .unwrap()
        .iter()
        .all(|w| !w.contains("skew_margin")));
}

#[test]
fn defaults_load_and_validate() {
    let c = Config::load_from(None, no_env()).unwrap();
    assert_eq!(c.lease.windows, LeaseWindows::default());
    // No default bank: a command without one says how to give it.
    assert_eq!(c.bank.url, "");
    let err = c.bank_url().unwrap_err().to_string();
    assert!(err.contains("--bank URL, set BANKLEASE_BANK=URL"), "{err}");
}

#[test]
fn file_and_env_override() {
    let f = file(
            "[bank]\nurl = \"memory://\"\n[lease]\nrenew_window = \"1s\"\nexpire_window = \"5s\"\nvalidity_window = \"500ms\"\n",
        );
    let env = vec![
        ("BANKLEASE_LEASE__EXPIRE_WINDOW".into(), "3s".into()),
        ("BANKLEASE_GC__CONCURRENCY".into(), "4".into()),
        ("BANKLEASE_CONFIG".into(), "ignored".into()),
        ("OTHER__THING".into(), "x".into()),
    ];
    let c = Config::load_from(Some(f.path()), env).unwrap();
    assert_eq!(c.bank.url, "memory://");
    assert_eq!(c.lease.windows.expire_window, Duration::from_secs(3));
    assert_eq!(c.lease.windows.validity_window, Duration::from_millis(500));
    assert_eq!(c.gc.concurrency, 4);
}

#[test]
fn unknown_key_in_file_names_key_and_file() {
    let f = file("[lease]\nexpire_windw = \"5s\"\n");
    let msg = Config::load_from(Some(f.path()), no_env())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("expire_windw"), "{msg}");
    assert!(msg.contains(&f.path().display().to_string()), "{msg}");
}

#[test]
fn an_unknown_key_beside_flattened_windows_is_refused_naming_the_closest() {
    let f = file("[gc]\nlease_renew_windw = \"5s\"\n");
    let msg = Config::load_from(Some(f.path()), no_env())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("`gc.lease_renew_windw`; did you mean `gc.lease_renew_window`?"),
        "{msg}"
    );
}

#[test]
fn variables_of_every_type_set_the_sections_with_windows() {
    let env = [
        ("BANKLEASE_GC__DRY_RUN", "true"),
        ("BANKLEASE_GC__CONCURRENCY", "4"),
        ("BANKLEASE_GC__BRAKE_RATIO", "0.25"),
        ("BANKLEASE_GC__METRICS_ADDR", "127.0.0.1:9187"),
        ("BANKLEASE_GC__LEASE_EXPIRE_WINDOW", "90s"),
        ("BANKLEASE_LEASE__RENEW_JITTER", "0.2"),
        ("BANKLEASE_LEASE__OWNER_ID_SCHEME", "uuid"),
        ("BANKLEASE_LEASE__EXPIRE_WINDOW", "660s"),
    ]
    .map(|(k, v)| (k.to_owned(), v.to_owned()));
    let c = Config::load_from(None, env).unwrap();
    assert!(c.gc.dry_run);
    assert_eq!(c.gc.concurrency, 4);
    assert_eq!(c.gc.brake_ratio, 0.25);
    assert_eq!(c.gc.metrics_addr.as_deref(), Some("127.0.0.1:9187"));
    assert_eq!(c.gc.lease.expire_window, Duration::from_secs(90));
    assert_eq!(
        c.gc.lease.renew_window,
        Duration::from_secs(10),
        "default kept"
    );
    assert_eq!(c.lease.renew_jitter, 0.2);
    assert_eq!(c.lease.owner_id_scheme, OwnerIdScheme::Uuid);
    assert_eq!(c.lease.windows.expire_window, Duration::from_secs(660));
    assert_eq!(
        c.lease.windows.renew_window,
        LeaseWindows::default().renew_window
    );
}

#[test]
fn unknown_section_is_refused() {
    let f = file("[leese]\nx = 1\n");
    let msg = Config::load_from(Some(f.path()), no_env())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("leese"), "{msg}");
}

#[test]
fn unknown_env_key_names_the_variable() {
    let env = vec![("BANKLEASE_LEASE__NOPE".into(), "1".into())];
    let msg = Config::load_from(None, env).unwrap_err().to_string();
    assert!(msg.contains("nope"), "{msg}");
    assert!(msg.contains("BANKLEASE_LEASE__NOPE"), "{msg}");
}

#[test]
fn bad_duration_and_type_are_refused() {
    let f = file("[lease]\nexpire_window = \"five seconds\"\n");
    let msg = Config::load_from(Some(f.path()), no_env())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("invalid configuration"), "{msg}");
    let f = file("[gc]\nconcurrency = \"many\"\n");
    let msg = Config::load_from(Some(f.path()), no_env())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("for key `gc.concurrency`"), "{msg}");
    let env = vec![("BANKLEASE_GC__LEASE_RENEW_WINDOW".into(), "soon".into())];
    let msg = Config::load_from(None, env).unwrap_err().to_string();
    assert!(msg.contains("for key `gc.lease_renew_window`"), "{msg}");
}

#[test]
fn window_rules_apply_to_loaded_config() {
    let env = vec![("BANKLEASE_LEASE__RENEW_WINDOW".into(), "700s".into())];
    let err = Config::load_from(None, env).unwrap_err();
    assert!(
        err.to_string().contains("renew_window < expire_window"),
        "{err}"
    );
}

/// Values that break the date arithmetic or that no observer can read back are refused at load,
/// naming the key.
#[test]
fn margins_and_windows_that_break_the_arithmetic_are_refused() {
    for (key, value, needle) in [
        ("BANKLEASE_LEASE__SKEW_MARGIN", "0s", "lease.skew_margin"),
        (
            "BANKLEASE_LEASE__SKEW_MARGIN",
            "300years",
            "lease.skew_margin",
        ),
        ("BANKLEASE_GC__GRACE", "300years", "gc.grace"),
        (
            "BANKLEASE_LEASE__EXPIRE_WINDOW",
            "40days",
            "expire_window <= 30days",
        ),
        ("BANKLEASE_GC__READ_STALENESS", "2days", "gc.read_staleness"),
        (
            "BANKLEASE_GC__LATE_WRITE_WINDOW",
            "0s",
            "gc.late_write_window",
        ),
    ] {
        let env = vec![(key.to_owned(), value.to_owned())];
        let err = Config::load_from(None, env)
            .map(|_| ())
            .expect_err(&format!("{key}={value} must be refused"));
        assert!(err.to_string().contains(needle), "{key}={value}: {err}");
    }
}

#[test]
fn check_hands_back_refusals_that_validate_fails_on() {
    // As `banklease --bank swift://c/p doctor` sees it: the URL set after loading.
    let mut c = Config::default();
    c.bank.url = "swift://c/p".to_owned();
    c.gc.grace = Duration::from_secs(60);
    c.gc.late_write_window = Duration::from_secs(60);
    let checked = c.check().unwrap();
    assert_eq!(checked.refusals, c.refusals());
    assert_eq!(checked.refusals.len(), 2, "{checked:?}");
    let err = c.validate().unwrap_err().to_string();
    for refusal in &checked.refusals {
        assert!(err.contains(refusal.as_str()), "{err}");
    }
    // Values out of range are still errors, not refusals.
    c.gc.concurrency = 0;
    assert!(c.check().is_err());
}

#[test]
fn missing_file_is_a_clear_error() {
    let msg = Config::load_from(Some(Path::new("/nonexistent/x.toml")), no_env())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("/nonexistent/x.toml"), "{msg}");
}

#[test]
fn example_config_in_etc_loads_and_lists_every_key() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("etc/banklease.toml");
    let c = Config::load_from(Some(&path), no_env()).unwrap();
    // Every key the program knows is present in the example (uncommented or commented).
    let text = std::fs::read_to_string(&path).unwrap();
    let value = serde_json::to_value(&c).unwrap();
    for (section, keys) in value.as_object().unwrap() {
        for key in keys.as_object().unwrap().keys() {
            assert!(
                text.contains(&format!("{key} =")) || text.contains(&format!("# {key} =")),
                "etc/banklease.toml lacks [{section}] {key}"
            );
        }
    }
}

#[test]
fn a_duration_without_a_unit_is_refused_with_the_unit_to_add() {
    let f = file("[lease]\nexpire_window = 600\n");
    let err = Config::load_from(Some(f.path()), no_env())
        .unwrap_err()
        .to_string();
    assert!(err.contains("add a unit, e.g. `600s`"), "{err}");
    assert!(err.contains("lease.expire_window"), "{err}");
    // A malformed duration with a unit is no bare number: no such hint.
    let f = file("[lease]\nexpire_window = \"10 parsecs\"\n");
    let err = Config::load_from(Some(f.path()), no_env())
        .unwrap_err()
        .to_string();
    assert!(!err.contains("add a unit"), "{err}");
    assert_eq!(
        parse_duration("30").unwrap_err(),
        "`30` has no unit: add a unit, e.g. `30s`"
    );
    assert!(!parse_duration("10 parsecs")
        .unwrap_err()
        .contains("add a unit"));
    assert_eq!(
        parse_duration(" 250ms").unwrap(),
        Duration::from_millis(250)
    );
}
