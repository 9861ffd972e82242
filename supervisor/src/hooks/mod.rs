//! hooks (to be filled by its issue).
