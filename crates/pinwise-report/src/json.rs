//! How the JSON outputs name things: a `format` and `version` at the top of each document,
//! snake_case names for kinds and states (not Rust's variant names), keyed objects instead
//! of positional arrays. The schemas are in `schemas/` at the repository root.
//!
//! Directions keep CUDA's own names (`HtoD`, `DtoH`, `DtoD`, `HtoH`, as in `cuMemcpyHtoD`),
//! as in history files.

use serde::ser::SerializeSeq;
use serde::Serializer;

/// `format` of `pinwise report --json`.
pub const REPORT_FORMAT: &str = "pinwise-report";
/// `version` of `pinwise report --json` (outputs without a `version` predate it).
pub const REPORT_VERSION: u32 = 1;
/// `format` of `pinwise diff --json`.
pub const DIFF_FORMAT: &str = "pinwise-diff";
/// `version` of `pinwise diff --json`.
pub const DIFF_VERSION: u32 = 1;

/// `CamelCase` as `camel_case`.
pub fn snake_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Serializes a fieldless enum by its variant name in snake_case (for core's enums, whose
/// own serialization is the history file format's and stays as it is).
pub(crate) fn snake<T: std::fmt::Debug, S: Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&snake_case(&format!("{value:?}")))
}

/// Serializes traffic buckets `[HtoD pageable, HtoD pinned, DtoH pageable, DtoH pinned]` as
/// `{"HtoD": {"pageable": n, "pinned": n}, "DtoH": {...}}` each.
pub(crate) fn traffic_buckets<S: Serializer>(
    buckets: &[[u64; 4]],
    s: S,
) -> Result<S::Ok, S::Error> {
    #[derive(serde::Serialize)]
    struct States {
        pageable: u64,
        pinned: u64,
    }
    #[derive(serde::Serialize)]
    struct Bucket {
        #[serde(rename = "HtoD")]
        htod: States,
        #[serde(rename = "DtoH")]
        dtoh: States,
    }
    let mut seq = s.serialize_seq(Some(buckets.len()))?;
    for b in buckets {
        seq.serialize_element(&Bucket {
            htod: States {
                pageable: b[0],
                pinned: b[1],
            },
            dtoh: States {
                pageable: b[2],
                pinned: b[3],
            },
        })?;
    }
    seq.end()
}

/// Serializes core's `HistoryStats` with its per-direction arrays (`transfers`,
/// `device_only_transfers`, indexed by `Direction::index`) as objects keyed by direction.
pub(crate) fn keyed_history_stats<S: Serializer>(
    stats: &pinwise_core::history::HistoryStats,
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::Serialize as _;
    let mut v = serde_json::to_value(stats).map_err(serde::ser::Error::custom)?;
    for key in ["transfers", "device_only_transfers"] {
        if let Some(serde_json::Value::Array(items)) = v.get(key).cloned() {
            let keyed: serde_json::Map<String, serde_json::Value> = pinwise_core::Direction::ALL
                .iter()
                .zip(items)
                .map(|(d, item)| (d.as_str().to_string(), item))
                .collect();
            v[key] = serde_json::Value::Object(keyed);
        }
    }
    v.serialize(s)
}

/// Serializes `(time_ns, pinned)` pairs as `{"at_ns": t, "pinned": p}` objects.
pub(crate) fn timed_transfers<S: Serializer>(
    transfers: &[(u64, bool)],
    s: S,
) -> Result<S::Ok, S::Error> {
    let mut seq = s.serialize_seq(Some(transfers.len()))?;
    for &(at_ns, pinned) in transfers {
        seq.serialize_element(&TimedTransfer { at_ns, pinned })?;
    }
    seq.end()
}

#[derive(serde::Serialize)]
struct TimedTransfer {
    at_ns: u64,
    pinned: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variant_names_become_snake_case() {
        assert_eq!(snake_case("PinnedAlloc"), "pinned_alloc");
        assert_eq!(snake_case("BinaryHistory"), "binary_history");
        assert_eq!(snake_case("Freed"), "freed");
        assert_eq!(snake_case("RegisterTouched"), "register_touched");
    }

    #[test]
    fn buckets_and_transfers_are_keyed() {
        #[derive(serde::Serialize)]
        struct T {
            #[serde(serialize_with = "traffic_buckets")]
            b: Vec<[u64; 4]>,
            #[serde(serialize_with = "timed_transfers")]
            t: Vec<(u64, bool)>,
        }
        let v = serde_json::to_value(T {
            b: vec![[1, 2, 3, 4]],
            t: vec![(7, true)],
        })
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "b": [{"HtoD": {"pageable": 1, "pinned": 2}, "DtoH": {"pageable": 3, "pinned": 4}}],
                "t": [{"at_ns": 7, "pinned": true}],
            })
        );
    }
}
