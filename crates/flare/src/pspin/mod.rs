//! The PsPIN switch model and Flare's dense aggregation designs (seed 004 §3–6).
