//! What an operator decides by hand, beside what a pass decides on its own.

pub mod delete;
pub mod resolve;
