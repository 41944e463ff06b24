//! The PostgresCluster world model for the engine's model-checking harness.
