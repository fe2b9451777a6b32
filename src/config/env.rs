//! The keys of the configuration: `BANKLEASE_*` variables that are not settings get a warning
//! naming the closest key, so that `BANKLEASE_BANK_URL` (one underscore) is not silently ignored;
//! an unknown key is refused naming the closest one; a variable's text is typed as TOML would.

use super::{Config, CONFIG_ENV, ENV_PREFIX};

/// Variables that are not configuration keys but that banklease (or its `run`) sets or reads.
const KNOWN: &[&str] = &[
    CONFIG_ENV,
    "BANKLEASE_BANK",
    "BANKLEASE_AGENT",
    "BANKLEASE_OWNER_ID",
    "BANKLEASE_LOCK_KEY",
    "BANKLEASE_LOCK_NAMESPACE",
    "BANKLEASE_LOCK_TOKEN",
    "BANKLEASE_LOCK_OWNER",
    "BANKLEASE_LOCK_SESSION",
    // How `lock run` and `run --lock` hold COMMAND's tree (`auto`, `cgroup`, `subreaper`).
    "BANKLEASE_TREE",
    // `1`: the CLI prints the HTTP requests it sent as it exits.
    "BANKLEASE_COUNT_REQUESTS",
];

/// Prefixes of the variables this repository's own tests and tools use.
const KNOWN_PREFIXES: &[&str] = &[
    "BANKLEASE_TEST_",
    "BANKLEASE_CHAOS_",
    "BANKLEASE_E2E_",
    "BANKLEASE_LOCAL_",
    "BANKLEASE_GC_BIN",
    "BANKLEASE_VENV",
];

/// Every configuration key as its variable (`BANKLEASE_LEASE__RENEW_WINDOW`) and its dotted
/// name (`lease.renew_window`), read off the defaults so that a new key is never missed.
fn keys() -> Vec<(String, String)> {
    let defaults = serde_json::to_value(Config::default()).expect("the defaults serialise");
    let mut keys = Vec::new();
    for (section, fields) in defaults.as_object().into_iter().flatten() {
        for field in fields.as_object().into_iter().flat_map(|f| f.keys()) {
            keys.push((
                format!("{ENV_PREFIX}{}__{}", section, field).to_ascii_uppercase(),
                format!("{section}.{field}"),
            ));
        }
    }
    keys
}

/// A warning for `name` when it starts with `BANKLEASE_`, is not `SECTION__KEY`, and is no
/// variable banklease knows; it names the closest key.
pub(super) fn unknown_variable(name: &str) -> Option<String> {
    let rest = name.strip_prefix(ENV_PREFIX)?;
    if rest.contains("__")
        || KNOWN.contains(&name)
        || KNOWN_PREFIXES.iter().any(|p| name.starts_with(p))
    {
        return None;
    }
    let squash = |s: &str| s.replace('_', "").to_ascii_lowercase();
    let closest = keys()
        .into_iter()
        .map(|(var, key)| {
            let distance = strsim::levenshtein(&squash(name), &squash(&var));
            (distance, var, key)
        })
        .min();
    let hint = match closest {
        Some((d, var, key)) if d <= 3 => format!("; did you mean `{var}` ({key})?"),
        _ => String::new(),
    };
    Some(format!(
        "environment variable `{name}` is not a banklease setting and is ignored{hint} \
         (settings are BANKLEASE_<SECTION>__<KEY>, with two underscores; see etc/banklease.toml)"
    ))
}

/// The refusal of the first unknown key of `table` (`lease.expire_windw`, or a whole
/// `[section]`), naming the closest known key; `None` when every key is known.
pub(super) fn unknown_key(table: &config::Map<String, config::Value>) -> Option<String> {
    let known = keys();
    let mut given = Vec::new();
    for (section, value) in table {
        match value.clone().into_table() {
            Ok(fields) => given.extend(fields.into_keys().map(|f| format!("{section}.{f}"))),
            Err(_) => given.push(section.clone()),
        }
    }
    given.sort();
    let key = given
        .into_iter()
        .find(|key| !known.iter().any(|(_, k)| k == key))?;
    let squash = |s: &str| s.replace('_', "").to_ascii_lowercase();
    let closest = known
        .into_iter()
        .map(|(_, k)| (strsim::levenshtein(&squash(&key), &squash(&k)), k))
        .min();
    let hint = match closest {
        Some((d, k)) if d <= 3 => format!("; did you mean `{k}`?"),
        _ => String::new(),
    };
    Some(format!(
        "unknown configuration key `{key}`{hint} (every key is listed in etc/banklease.toml)"
    ))
}

/// `error` naming the key at fault: serde reports a bad value inside the flattened windows'
/// sections as `for key \`lease\``, so each key of that section is tried alone over the
/// defaults, and the first that fails alone is named (`for key \`lease.expire_window\``).
pub(super) fn name_the_key(
    error: String,
    table: &config::Map<String, config::Value>,
    defaults: &config::Config,
) -> String {
    for section in ["lease", "gc"] {
        let whole = format!("for key `{section}`");
        if !error.contains(&whole) {
            continue;
        }
        let fields = table
            .get(section)
            .and_then(|v| v.clone().into_table().ok())
            .unwrap_or_default();
        let mut keys: Vec<_> = fields.into_iter().collect();
        keys.sort_by(|a, b| a.0.cmp(&b.0));
        for (key, value) in keys {
            let alone = config::Config::builder()
                .add_source(defaults.clone())
                .set_override(format!("{section}.{key}"), value)
                .and_then(|b| b.build())
                .and_then(|c| c.try_deserialize::<Config>());
            if alone.is_err() {
                return error.replace(&whole, &format!("for key `{section}.{key}`"));
            }
        }
    }
    error
}

/// A variable's text as the value it spells: a boolean, an integer or a number when it reads as
/// one, else text. The sections whose windows are flattened (`[lease]`, `[gc]`) are read through
/// serde's buffered values, which do not turn text into numbers the way the `config` crate's own
/// reading does.
pub(super) fn typed(text: String) -> config::Value {
    if let Ok(b) = text.to_ascii_lowercase().parse::<bool>() {
        b.into()
    } else if let Ok(i) = text.parse::<i64>() {
        i.into()
    } else if let Some(f) = text.parse::<f64>().ok().filter(|f| f.is_finite()) {
        f.into()
    } else {
        text.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_underscore_names_the_key_meant() {
        let w = unknown_variable("BANKLEASE_BANK_URL").unwrap();
        assert!(w.contains("`BANKLEASE_BANK__URL` (bank.url)"), "{w}");
        let w = unknown_variable("BANKLEASE_LEASE_RENEW_WINDOW").unwrap();
        assert!(
            w.contains("`BANKLEASE_LEASE__RENEW_WINDOW` (lease.renew_window)"),
            "{w}"
        );
        let w = unknown_variable("BANKLEASE_GC_GRACE").unwrap();
        assert!(w.contains("(gc.grace)"), "{w}");
    }

    #[test]
    fn far_names_get_no_guess_and_known_ones_no_warning() {
        let w = unknown_variable("BANKLEASE_SOMETHING_ELSE_ENTIRELY").unwrap();
        assert!(!w.contains("did you mean"), "{w}");
        for name in [
            "BANKLEASE_CONFIG",
            "BANKLEASE_BANK",
            "BANKLEASE_AGENT",
            "BANKLEASE_LOCK_TOKEN",
            "BANKLEASE_TEST_S3",
            "BANKLEASE_LEASE__EXPIRE_WINDOW",
            "OTHER_BANK_URL",
        ] {
            assert_eq!(unknown_variable(name), None, "{name}");
        }
    }
}
