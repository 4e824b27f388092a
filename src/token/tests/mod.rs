//! Token tests: vectors, deny matrix, proptests.
