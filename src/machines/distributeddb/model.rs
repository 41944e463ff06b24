//! The DistributedDB world model for the engine's model-checking harness.
