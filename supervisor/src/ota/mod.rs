//! ota (to be filled by its issue).
