//! The URL schemes a bank is opened from, told apart in one place for [`Bank::open`] and the
//! configuration's rules.
//!
//! [`Bank::open`]: super::Bank::open

/// A bank URL's scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scheme {
    /// `file:` — a local directory.
    File,
    /// `memory://` — in-process, for tests.
    Memory,
    /// `s3://` — S3 or an S3-compatible server.
    S3,
    /// `az://` — Azure Blob Storage.
    Azure,
    /// `gs://` — Google Cloud Storage.
    Gcs,
    /// `swift://` — OpenStack Swift (the native client).
    Swift,
}

const PREFIXES: [(Scheme, &str); 6] = [
    (Scheme::File, "file:"),
    (Scheme::Memory, "memory://"),
    (Scheme::S3, "s3://"),
    (Scheme::Azure, "az://"),
    (Scheme::Gcs, "gs://"),
    (Scheme::Swift, "swift://"),
];

impl Scheme {
    /// `url`'s scheme and what follows it; `None` for a scheme banklease does not open.
    pub(crate) fn split(url: &str) -> Option<(Scheme, &str)> {
        let url = url.trim();
        PREFIXES
            .iter()
            .find_map(|(scheme, prefix)| url.strip_prefix(prefix).map(|rest| (*scheme, rest)))
    }

    /// The prefix of its URLs (`s3://`).
    pub(crate) fn prefix(self) -> &'static str {
        PREFIXES
            .iter()
            .find(|(scheme, _)| *scheme == self)
            .map_or("", |(_, prefix)| prefix)
    }

    /// `url`'s scheme.
    pub(crate) fn of(url: &str) -> Option<Scheme> {
        Self::split(url).map(|(scheme, _)| scheme)
    }

    /// The variable object_store reads its client's request timeout from, for the schemes it
    /// opens.
    pub(crate) fn timeout_variable(self) -> Option<&'static str> {
        match self {
            Scheme::S3 => Some("AWS_TIMEOUT"),
            Scheme::Azure => Some("AZURE_TIMEOUT"),
            Scheme::Gcs => Some("GOOGLE_TIMEOUT"),
            Scheme::File | Scheme::Memory | Scheme::Swift => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_scheme_is_told_by_its_prefix() {
        assert_eq!(Scheme::split(" s3://b/p "), Some((Scheme::S3, "b/p")));
        assert_eq!(Scheme::split("file:rel"), Some((Scheme::File, "rel")));
        assert_eq!(Scheme::of("swift://c"), Some(Scheme::Swift));
        assert_eq!(Scheme::of("ftp://x"), None);
        assert_eq!(Scheme::of("/tmp/x"), None);
    }
}
