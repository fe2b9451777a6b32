//! Any process as an owner: `banklease run -- COMMAND` holds an owner lease while COMMAND runs
//! and answers COMMAND's owner operations over a Unix socket (the agent).
//!
//! - [`run`]: the supervisor (`banklease run`): lease, keeper, socket, child, signals, exit.
//! - [`server`]: the agent's HTTP API over the socket, with the lease's validity checked by the
//!   library before every write.
//! - [`upload`]: a request's body streamed into a data object, in parts when it is large.
//! - [`client`]: `banklease agent …`, the API from a shell.
//! - `dir`: the agent's private directory, and the removal of those killed `run`s left.
//! - [`api`]: the JSON bodies both sides share, and the API's documentation.

mod answer;
pub mod api;
pub mod client;
mod dir;
pub mod run;
pub mod server;
mod upload;
