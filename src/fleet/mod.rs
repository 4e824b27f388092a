//! Fleet state (PROTOCOL §16): what an operator selects nodes by and what each node is
//! asked to be and says it is. Pure, for both roles: [`inventory`] (what a node reports
//! about itself, and when a new reading is worth sending), [`labels`] (set upstream, checked
//! and changed as a whole), [`selector`] (the one selector grammar: parse with the
//! position of a fault, match against labels and inventory facts), [`state`] (desired
//! and reported documents with versions, RFC 7396 merge patches, the delta).

pub mod inventory;
pub mod labels;
pub mod rate;
pub mod selector;
pub mod state;
pub mod tenant;

pub use inventory::Inventory;
pub use labels::{LabelChange, LabelError, Labels};
pub use selector::{BadSelector, Selector};
pub use state::{delta, merge_patch, StateError, Versioned, Write};
