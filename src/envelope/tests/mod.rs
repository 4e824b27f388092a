//! Cross-cutting tests: vectors, tamper matrix, proptests.
