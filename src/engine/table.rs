//! The declarative form of a transition table: [`edges!`](crate::edges).
//!
//! Every machine (the shipped ones and the engine's examples) declares its table with
//! this one macro, one row per edge or per group of edges, each naming the source file
//! that takes it:
//!
//! ```text
//! pub static TABLE: &[Edge<Kind>] = lockstep::edges![Kind;
//!     // One edge.
//!     Creating -> Ready: ALL_READY, "every pod is Ready", creating::SOURCE;
//!     // The same edge from several states.
//!     [Creating, Ready] -> Finalizing: DELETION_REQUESTED, "deleted", finalize::SOURCE;
//!     // Several edges from each of several states, in that order.
//!     [Creating, Ready] -> {
//!         Finalizing: DELETION_REQUESTED, "deleted; a final backup is taken", finalize::SOURCE;
//!         Finalized: NO_BACKUP_POLICY, "deleted without a backup", finalize::SOURCE;
//!     }
//!     // Rows several machines share, from a fragment macro (see below).
//!     on_demand_edges!(backup: "spec.backup");
//! ];
//! ```
//!
//! A fragment is a `macro_rules!` macro that rows in several tables share. It is called
//! as `fragment! { @edges Kind [done] [rest] args... }` and hands its rows on with
//! `$crate::edges!(@rows Kind [done] its rows... rest...)`:
//!
//! ```text
//! macro_rules! on_demand_edges {
//!     (@edges $kind:ident [$($done:tt)*] [$($rest:tt)*] backup: $field:literal) => {
//!         $crate::edges!(@rows $kind [$($done)*]
//!             Ready -> BackingUp: BACKUP_REQUESTED, "a backup was requested", SOURCE;
//!             $($rest)*)
//!     };
//! }
//! ```
//!
//! The rows expand, in order, to [`Edge`](super::Edge)s: the table a reader sees is the
//! table the engine enforces and `lockstep machines` exports, with no hand-counted sizes.
//! The `when` of a row is a string literal (or a `concat!` of them); the last item of a row
//! is the file whose code takes the edge (a `SOURCE: &str =
//! file!()` constant of that module, or `file!()` itself); the exported statechart links
//! each edge to it.

/// Declare a transition table: `edges![Kind; rows...]` is a `&'static [Edge<Kind>]`
/// usable in a `static`. See [the module](crate::engine::table) for the row forms.
#[macro_export]
macro_rules! edges {
    ($kind:ident; $($rows:tt)*) => {
        $crate::edges!(@rows $kind [] $($rows)*)
    };
    (@rows $kind:ident [$($acc:tt)*]) => {
        &[$($acc)*]
    };
    (@rows $kind:ident [$($acc:tt)*]
        $fragment:ident ! ( $($args:tt)* );
        $($rest:tt)*
    ) => {
        $fragment! { @edges $kind [$($acc)*] [$($rest)*] $($args)* }
    };
    (@rows $kind:ident [$($acc:tt)*]
        [$($from:ident),+ $(,)?] -> $to:ident : $reason:path, $when:expr, $by:expr;
        $($rest:tt)*
    ) => {
        $crate::edges!(@rows $kind [$($acc)*]
            $($from -> $to : $reason, $when, $by;)+
            $($rest)*)
    };
    (@rows $kind:ident [$($acc:tt)*]
        [$($from:ident),+ $(,)?] -> $body:tt
        $($rest:tt)*
    ) => {
        $crate::edges!(@rows $kind [$($acc)*] $($from -> $body)+ $($rest)*)
    };
    (@rows $kind:ident [$($acc:tt)*]
        $from:ident -> $to:ident : $reason:path, $when:expr, $by:expr;
        $($rest:tt)*
    ) => {
        $crate::edges!(@rows $kind [$($acc)*
            $crate::engine::Edge::new($kind::$from, $kind::$to, $reason, $when).taken_in($by),
        ] $($rest)*)
    };
    (@rows $kind:ident [$($acc:tt)*]
        $from:ident -> { $($to:ident : $reason:path, $when:expr, $by:expr;)+ }
        $($rest:tt)*
    ) => {
        $crate::edges!(@rows $kind [$($acc)*
            $($crate::engine::Edge::new($kind::$from, $kind::$to, $reason, $when).taken_in($by),)+
        ] $($rest)*)
    };
}
