//! A model of redbell's wait protocol, checked exhaustively for small
//! instances with [stateright](https://docs.rs/stateright).
//!
//! - [`scripts`]: the server, one pure step function per Lua script.
//! - `client`, `model`: the clients' behaviour and the checked model.
#![forbid(unsafe_code)]

pub mod scripts;
