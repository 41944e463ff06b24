//! The machines Lockstep ships, each bound to its custom resource.
