//! The engine: see DESIGN.md section 6.
