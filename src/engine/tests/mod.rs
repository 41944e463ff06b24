//! The engine's unit tests and the model-checking harness's own tests.

mod export;
mod harness;
mod restart;
mod step;
mod toy;
