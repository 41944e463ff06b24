//! The engine's unit tests.

mod export;
mod step;
mod toy;
