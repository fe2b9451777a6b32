//! How a pass reads and trusts the store's clock: the skew margin against the store's stamp
//! resolution, step detection between readings ([`timing::ClockWatch`]), the floor a confirmed
//! forward step leaves, and the per-host record that lets a one-shot pass see a step since the last
//! pass on its host ([`host_clock`]), and the confirmed steps a retention does not count
//! ([`steps`]). [`probe`] is the one reader a pass uses.

pub(crate) mod host_clock;
pub(crate) mod probe;
pub mod steps;
pub mod timing;

pub use timing::check_skew_margin;
