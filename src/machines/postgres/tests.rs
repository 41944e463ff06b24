//! Unit tests of `decide` and of rendering, read as sentences.
