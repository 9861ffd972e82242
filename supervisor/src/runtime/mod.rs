//! runtime (to be filled by its issue).
