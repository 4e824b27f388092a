//! Rollouts (PROTOCOL §17): one action to every node a selector selects, in phases,
//! with thresholds, a deadline, halt, resume and cancel. [`plan`] is the logic (pure).

pub mod plan;
