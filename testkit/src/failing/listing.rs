//! Eventually consistent listings ([`FailingStore::set_listing_lag`]): what a lagging listing
//! hides (new objects) and still shows (deleted ones), measured on the wrapper's clock.

use std::collections::BTreeMap;

use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, Result};

use super::faults::{injected, Timing};
use super::{FailingStore, Op, Strike};

impl<T: ObjectStore> FailingStore<T> {
    /// Whether a write of `location` must first find out if the object exists (an overwrite of
    /// a listed object does not hide it).
    pub(super) fn must_probe(&self, location: &Path) -> bool {
        self.lagging() && !self.script().consistency.present.contains(location)
    }

    /// Note a landed write of `location` (`existed`: it was there before), for the listing lag.
    pub(super) fn wrote(&self, location: &Path, existed: bool) {
        let Some(now) = self.now() else { return };
        let mut s = self.script();
        let c = &mut s.consistency;
        if c.lag.is_zero() {
            return;
        }
        c.ghosts.remove(location);
        if c.present.insert(location.clone()) && !existed {
            let lag = c.lag;
            c.visible_from.insert(location.clone(), now + lag);
        }
    }

    /// Note a landed deletion of `location` (as `meta` was), for the listing lag.
    pub(super) fn deleted(&self, location: &Path, meta: Option<ObjectMeta>) {
        let Some(now) = self.now() else { return };
        let mut s = self.script();
        let c = &mut s.consistency;
        if c.lag.is_zero() {
            return;
        }
        c.present.remove(location);
        c.visible_from.remove(location);
        if let Some(meta) = meta {
            let lag = c.lag;
            c.ghosts.insert(location.clone(), (meta, now + lag));
        }
    }

    pub(super) fn lagging(&self) -> bool {
        !matches!(self.timing, Timing::None) && !self.script().consistency.lag.is_zero()
    }
}

impl<T: ObjectStore> FailingStore<T> {
    pub(super) fn list_faulty(
        &self,
        prefix: Option<&Path>,
        offset: Option<&Path>,
        inner: BoxStream<'static, Result<ObjectMeta>>,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        let this = self.clone();
        let prefix = prefix.cloned();
        let offset = offset.cloned();
        futures::stream::once(async move {
            let fate = match this.enter(Op::List, false).await {
                Err(e) => return futures::stream::iter([Err(e)]).boxed(),
                Ok(fate) => fate,
            };
            if let Some((timeout, _)) = fate.timeout {
                this.spend(timeout).await;
                let e = injected(Op::List, &format!("timed out after {timeout:?}"));
                return futures::stream::iter([Err(e)]).boxed();
            }
            this.spend(fate.before + fate.after).await;
            this.deliver_late(fate.late).await;
            let inner = if this.lagging() {
                // Read the whole inner listing, then show it as a lagging store would.
                let mut items = Vec::new();
                let mut error = None;
                let mut inner = inner;
                while let Some(item) = inner.next().await {
                    match item {
                        Ok(meta) => items.push(meta),
                        Err(e) => {
                            error = Some(e);
                            break;
                        }
                    }
                }
                let shown = this.apply_lag(prefix.as_ref(), offset.as_ref(), items, None);
                futures::stream::iter(shown.into_iter().map(Ok).chain(error.map(Err))).boxed()
            } else {
                inner
            };
            match fate.strike {
                // A listing struck "after" fails once its first entry has been seen.
                Some(Strike::After) => {
                    this.script().counts.errors_after += 1;
                    inner
                        .take(1)
                        .chain(futures::stream::iter([Err(injected(
                            Op::List,
                            "after the first entry",
                        ))]))
                        .boxed()
                }
                _ => inner,
            }
        })
        .flatten()
        .boxed()
    }

    /// Hide entries written too recently and add those deleted too recently, in path order.
    /// `delimited` is `Some(prefix)` for a listing with delimiter: ghosts must then be direct
    /// children of the prefix.
    pub(super) fn apply_lag(
        &self,
        prefix: Option<&Path>,
        offset: Option<&Path>,
        items: Vec<ObjectMeta>,
        delimited: Option<Option<&Path>>,
    ) -> Vec<ObjectMeta> {
        let Some(now) = self.now() else { return items };
        let mut s = self.script();
        let s = &mut *s;
        let c = &mut s.consistency;
        c.ghosts.retain(|_, (_, until)| *until > now);
        c.visible_from.retain(|_, from| *from > now);
        let root = Path::default();
        let prefix = prefix.unwrap_or(&root);
        let mut hidden = 0;
        let mut shown: BTreeMap<Path, ObjectMeta> = BTreeMap::new();
        for meta in items {
            if c.visible_from.contains_key(&meta.location) {
                hidden += 1;
            } else {
                shown.insert(meta.location.clone(), meta);
            }
        }
        let mut ghosts = 0;
        for (path, (meta, _)) in &c.ghosts {
            let Some(mut rest) = path.prefix_match(prefix) else {
                continue;
            };
            let depth_ok = match delimited {
                Some(_) => rest.next().is_some() && rest.next().is_none(),
                None => rest.next().is_some(),
            };
            if !depth_ok || offset.is_some_and(|o| path <= o) || shown.contains_key(path) {
                continue;
            }
            shown.insert(path.clone(), meta.clone());
            ghosts += 1;
        }
        s.counts.listing_hidden += hidden;
        s.counts.listing_ghosts += ghosts;
        shown.into_values().collect()
    }
}
