//! The cost model: how long a transfer takes from pageable and from pinned memory, and what
//! pinning and unpinning cost, as functions of size.
//!
//! It is a calibration table (one row per measured size) read from a CSV file in the format
//! of `data/h200-transfer-and-pin-costs.csv`, which is also the built-in default
//! ([`CostModel::builtin`], measured on an NVIDIA H200 over PCIe Gen5 x16) and what
//! `pinwise calibrate` writes ([`CostModel::to_csv`]). Lines starting with `#` are comments.
//!
//! Between measured sizes, times are interpolated linearly in log(time) over log(size)
//! (bandwidth curves are smooth on that scale). Below the smallest size the time stays that
//! of the smallest (latency dominates small copies and small pins); above the largest it
//! grows in proportion to the size (the last bandwidth, the last cost per byte).

use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::event::Direction;

/// How memory gets pinned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PinMethod {
    /// Allocate page-locked memory (`cuMemHostAlloc`/`cudaMallocHost`), freed with
    /// `cuMemFreeHost`.
    MallocHost,
    /// Register memory that is already allocated and touched (`cuMemHostRegister`),
    /// unregistered with `cuMemHostUnregister`.
    RegisterTouched,
}

/// One measured size: the columns of the calibration CSV.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CalibrationPoint {
    /// Size measured, in bytes.
    pub size_bytes: u64,
    /// Host-to-device bandwidth from pageable memory, GB/s (1e9 bytes/s).
    #[serde(rename = "pageable_h2d_GBps")]
    pub pageable_h2d_gbps: f64,
    /// Host-to-device bandwidth from `cuMemHostAlloc` memory, GB/s.
    #[serde(rename = "pinned_h2d_GBps")]
    pub pinned_h2d_gbps: f64,
    /// Host-to-device bandwidth from registered memory, GB/s.
    #[serde(rename = "registered_h2d_GBps")]
    pub registered_h2d_gbps: f64,
    /// Device-to-host bandwidth into pageable memory, GB/s.
    #[serde(rename = "pageable_d2h_GBps")]
    pub pageable_d2h_gbps: f64,
    /// Device-to-host bandwidth into pinned memory, GB/s.
    #[serde(rename = "pinned_d2h_GBps")]
    pub pinned_d2h_gbps: f64,
    /// Time of `cuMemHostAlloc` of this size, microseconds.
    pub mallochost_us: f64,
    /// Time of `cuMemFreeHost`, microseconds.
    pub freehost_us: f64,
    /// Time of `cuMemHostRegister` of touched memory, microseconds.
    pub hostregister_us: f64,
    /// Time of `cuMemHostUnregister`, microseconds.
    pub hostunregister_us: f64,
    /// Time to obtain fresh pageable memory and touch every page, microseconds: what fresh
    /// memory costs before it can be registered. `pinwise calibrate` maps it the way the
    /// allocator does (an anonymous mapping; large ones on huge pages, populated) and
    /// touches every page. The built-in H200 table's column comes from the shared
    /// measurements, which say only what its name says (`malloc`, then touch): it is not
    /// known to match the allocator's way of mapping, and from 1 MiB on it is 1.4 to 5
    /// times what `pinwise calibrate` measured on an H200
    /// (`bench/results/gpu-calibration-h200.csv`).
    pub malloc_touch_us: f64,
}

const COLUMNS: [&str; 11] = [
    "size_bytes",
    "pageable_h2d_GBps",
    "pinned_h2d_GBps",
    "registered_h2d_GBps",
    "pageable_d2h_GBps",
    "pinned_d2h_GBps",
    "mallochost_us",
    "freehost_us",
    "hostregister_us",
    "hostunregister_us",
    "malloc_touch_us",
];

/// A column of the table, as a time in nanoseconds at each measured size.
#[derive(Debug, Clone, Copy)]
enum Curve {
    PageableH2D,
    PinnedH2D,
    RegisteredH2D,
    PageableD2H,
    PinnedD2H,
    MallocHost,
    FreeHost,
    HostRegister,
    HostUnregister,
    MallocTouch,
}

const CURVES: usize = 10;

impl Curve {
    fn ns(self, p: &CalibrationPoint) -> f64 {
        let size = p.size_bytes as f64;
        // bytes / (GB/s) = bytes / (1e9 bytes/s) s = bytes / GBps ns
        match self {
            Curve::PageableH2D => size / p.pageable_h2d_gbps,
            Curve::PinnedH2D => size / p.pinned_h2d_gbps,
            Curve::RegisteredH2D => size / p.registered_h2d_gbps,
            Curve::PageableD2H => size / p.pageable_d2h_gbps,
            Curve::PinnedD2H => size / p.pinned_d2h_gbps,
            Curve::MallocHost => p.mallochost_us * 1e3,
            Curve::FreeHost => p.freehost_us * 1e3,
            Curve::HostRegister => p.hostregister_us * 1e3,
            Curve::HostUnregister => p.hostunregister_us * 1e3,
            Curve::MallocTouch => p.malloc_touch_us * 1e3,
        }
    }
}

/// The largest calibration file read (calibrations are a few KiB).
pub const MAX_CALIBRATION_BYTES: u64 = 16 << 20;

/// Why a calibration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CostModelError {
    /// The file could not be read.
    #[error("cannot read calibration file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// What went wrong.
        source: std::io::Error,
    },
    /// The CSV could not be parsed.
    #[error("calibration {source_name}, line {line}: {message}")]
    Parse {
        /// The file (or "built-in").
        source_name: String,
        /// 1-based line.
        line: u64,
        /// What is wrong.
        message: String,
    },
    /// The table has no rows.
    #[error("calibration {0} has no measured sizes")]
    Empty(String),
}

/// The cost model. Cheap to clone.
#[derive(Debug, Clone, PartialEq)]
pub struct CostModel {
    points: Vec<CalibrationPoint>,
    source: String,
    ln_size: Vec<f64>,
    ln_ns: [Vec<f64>; CURVES],
}

/// The built-in calibration, measured on an NVIDIA H200 (PCIe Gen5 x16).
pub const BUILTIN_CSV: &str = include_str!("../data/h200-transfer-and-pin-costs.csv");

impl CostModel {
    /// The built-in calibration ([`BUILTIN_CSV`]).
    pub fn builtin() -> CostModel {
        // The built-in table is part of the source and parsed by a unit test.
        CostModel::from_csv_str(BUILTIN_CSV, "built-in (H200)")
            .expect("the built-in calibration parses")
    }

    /// Reads a calibration CSV file: a regular file of at most [`MAX_CALIBRATION_BYTES`]
    /// (a device or a huge file is refused before it is read).
    pub fn from_csv_file(path: impl AsRef<Path>) -> Result<CostModel, CostModelError> {
        let path = path.as_ref();
        let io = |source| CostModelError::Io {
            path: path.display().to_string(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(io)?;
        if !meta.is_file() || meta.len() > MAX_CALIBRATION_BYTES {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "not a regular file of at most {MAX_CALIBRATION_BYTES} bytes (a calibration \
                     is a small CSV)"
                ),
            )));
        }
        let text = std::fs::read_to_string(path).map_err(io)?;
        CostModel::from_csv_str(&text, &path.display().to_string())
    }

    /// Parses calibration CSV text; `source_name` appears in errors.
    pub fn from_csv_str(text: &str, source_name: &str) -> Result<CostModel, CostModelError> {
        let parse_err = |line: u64, message: String| CostModelError::Parse {
            source_name: source_name.to_owned(),
            line,
            message,
        };
        let mut reader = csv::ReaderBuilder::new()
            .comment(Some(b'#'))
            .trim(csv::Trim::All)
            .from_reader(text.as_bytes());
        let headers = reader
            .headers()
            .map_err(|e| parse_err(csv_line(&e), e.to_string()))?
            .clone();
        for col in COLUMNS {
            if !headers.iter().any(|h| h == col) {
                return Err(parse_err(
                    1,
                    format!("missing column `{col}` (expected: {})", COLUMNS.join(",")),
                ));
            }
        }
        let mut points = Vec::new();
        for row in reader.records() {
            let row = row.map_err(|e| parse_err(csv_line(&e), e.to_string()))?;
            let line = row.position().map_or(0, |p| p.line());
            let p: CalibrationPoint = row
                .deserialize(Some(&headers))
                .map_err(|e| parse_err(line, e.to_string()))?;
            points.push((line, p));
        }
        Self::from_rows(points, source_name)
    }

    /// A model from measured points (sorted by size, strictly increasing).
    pub fn from_points(
        points: Vec<CalibrationPoint>,
        source_name: &str,
    ) -> Result<CostModel, CostModelError> {
        Self::from_rows(
            points
                .into_iter()
                .enumerate()
                .map(|(i, p)| (i as u64 + 1, p))
                .collect(),
            source_name,
        )
    }

    fn from_rows(
        rows: Vec<(u64, CalibrationPoint)>,
        source_name: &str,
    ) -> Result<CostModel, CostModelError> {
        if rows.is_empty() {
            return Err(CostModelError::Empty(source_name.to_owned()));
        }
        let mut prev = 0u64;
        for (line, p) in &rows {
            let bad = |message: String| CostModelError::Parse {
                source_name: source_name.to_owned(),
                line: *line,
                message,
            };
            if p.size_bytes <= prev {
                return Err(bad(format!(
                    "size_bytes {} must be positive and larger than the row before ({prev})",
                    p.size_bytes
                )));
            }
            prev = p.size_bytes;
            let values = [
                ("pageable_h2d_GBps", p.pageable_h2d_gbps),
                ("pinned_h2d_GBps", p.pinned_h2d_gbps),
                ("registered_h2d_GBps", p.registered_h2d_gbps),
                ("pageable_d2h_GBps", p.pageable_d2h_gbps),
                ("pinned_d2h_GBps", p.pinned_d2h_gbps),
                ("mallochost_us", p.mallochost_us),
                ("freehost_us", p.freehost_us),
                ("hostregister_us", p.hostregister_us),
                ("hostunregister_us", p.hostunregister_us),
                ("malloc_touch_us", p.malloc_touch_us),
            ];
            for (name, v) in values {
                if !(v.is_finite() && v > 0.0) {
                    return Err(bad(format!("{name} must be a positive number, got {v}")));
                }
            }
        }
        let points: Vec<CalibrationPoint> = rows.into_iter().map(|(_, p)| p).collect();
        let ln_size = points.iter().map(|p| (p.size_bytes as f64).ln()).collect();
        let curves = [
            Curve::PageableH2D,
            Curve::PinnedH2D,
            Curve::RegisteredH2D,
            Curve::PageableD2H,
            Curve::PinnedD2H,
            Curve::MallocHost,
            Curve::FreeHost,
            Curve::HostRegister,
            Curve::HostUnregister,
            Curve::MallocTouch,
        ];
        let ln_ns = curves.map(|c| points.iter().map(|p| c.ns(p).ln()).collect());
        Ok(CostModel {
            points,
            source: source_name.to_owned(),
            ln_size,
            ln_ns,
        })
    }

    /// The measured points.
    pub fn points(&self) -> &[CalibrationPoint] {
        &self.points
    }

    /// Where the calibration came from (file name, or "built-in (H200)").
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The same table under another source name (to say how it was chosen).
    pub fn with_source(mut self, source: impl Into<String>) -> CostModel {
        self.source = source.into();
        self
    }

    /// The calibration as CSV, in the format [`CostModel::from_csv_str`] reads.
    pub fn to_csv(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# pinwise calibration (source: {})", self.source);
        let _ = writeln!(
            out,
            "# Bandwidths in GB/s (1e9 bytes/s), times in microseconds."
        );
        out.push_str(&COLUMNS.join(","));
        out.push('\n');
        for p in &self.points {
            let _ = writeln!(
                out,
                "{},{},{},{},{},{},{},{},{},{},{}",
                p.size_bytes,
                p.pageable_h2d_gbps,
                p.pinned_h2d_gbps,
                p.registered_h2d_gbps,
                p.pageable_d2h_gbps,
                p.pinned_d2h_gbps,
                p.mallochost_us,
                p.freehost_us,
                p.hostregister_us,
                p.hostunregister_us,
                p.malloc_touch_us
            );
        }
        out
    }

    fn curve_ns(&self, curve: Curve, bytes: u64) -> f64 {
        if bytes == 0 {
            return 0.0;
        }
        let ln_ns = &self.ln_ns[curve as usize];
        let n = self.points.len();
        let first = self.points[0].size_bytes;
        let last = self.points[n - 1].size_bytes;
        if bytes <= first {
            return ln_ns[0].exp();
        }
        if bytes >= last {
            return ln_ns[n - 1].exp() * (bytes as f64 / last as f64);
        }
        // points[i].size <= bytes < points[i + 1].size
        let i = self.points.partition_point(|p| p.size_bytes <= bytes) - 1;
        let x = (bytes as f64).ln();
        let t = (x - self.ln_size[i]) / (self.ln_size[i + 1] - self.ln_size[i]);
        (ln_ns[i] + t * (ln_ns[i + 1] - ln_ns[i])).exp()
    }

    /// Time of one copy of `bytes` in `direction` from (or into) pageable or pinned host
    /// memory, ns. Device-to-device and host-to-host copies do not depend on host pinning:
    /// both answers are the pinned host-to-device time.
    pub fn transfer_ns(&self, direction: Direction, bytes: u64, pinned: bool) -> f64 {
        let curve = match (direction, pinned) {
            (Direction::HtoD, false) => Curve::PageableH2D,
            (Direction::HtoD, true) => Curve::PinnedH2D,
            (Direction::DtoH, false) => Curve::PageableD2H,
            (Direction::DtoH, true) => Curve::PinnedD2H,
            (Direction::DtoD | Direction::HtoH, _) => Curve::PinnedH2D,
        };
        self.curve_ns(curve, bytes)
    }

    /// Time of one copy from (or into) registered memory, ns (host-to-device has its own
    /// column; other directions use the pinned time).
    pub fn transfer_ns_registered(&self, direction: Direction, bytes: u64) -> f64 {
        match direction {
            Direction::HtoD => self.curve_ns(Curve::RegisteredH2D, bytes),
            d => self.transfer_ns(d, bytes, true),
        }
    }

    /// Time one copy saves when the host side is pinned instead of pageable, ns (negative
    /// where pinned copies are slower, as for 4 KiB host-to-device on the H200).
    pub fn transfer_saving_ns(&self, direction: Direction, bytes: u64) -> f64 {
        self.transfer_ns(direction, bytes, false) - self.transfer_ns(direction, bytes, true)
    }

    /// As [`CostModel::transfer_saving_ns`], for memory pinned by `method`: registered
    /// memory's host-to-device copies are timed with the `registered_h2d_GBps` column.
    pub fn transfer_saving_ns_by(
        &self,
        direction: Direction,
        bytes: u64,
        method: PinMethod,
    ) -> f64 {
        match method {
            PinMethod::MallocHost => self.transfer_saving_ns(direction, bytes),
            PinMethod::RegisterTouched => {
                self.transfer_ns(direction, bytes, false)
                    - self.transfer_ns_registered(direction, bytes)
            }
        }
    }

    /// Bytes of GPU page table that pinning `bytes` of host memory takes in one process
    /// ([`crate::pagetable`]: 8 bytes per 4 KiB page, measured on an H100), at least one
    /// entry.
    pub fn page_table_bytes(bytes: u64) -> u64 {
        crate::pagetable::estimated_gpu_bytes(bytes.max(1).next_multiple_of(4096), 1)
    }

    /// Cost of pinning `bytes` by `method`, ns: the time of `cuMemHostAlloc`, or of
    /// `cuMemHostRegister` on touched memory.
    pub fn pin_cost_ns(&self, bytes: u64, method: PinMethod) -> f64 {
        match method {
            PinMethod::MallocHost => self.curve_ns(Curve::MallocHost, bytes),
            PinMethod::RegisterTouched => self.curve_ns(Curve::HostRegister, bytes),
        }
    }

    /// Cost of unpinning `bytes` pinned by `method`, ns: `cuMemFreeHost`, or
    /// `cuMemHostUnregister`.
    pub fn unpin_cost_ns(&self, bytes: u64, method: PinMethod) -> f64 {
        match method {
            PinMethod::MallocHost => self.curve_ns(Curve::FreeHost, bytes),
            PinMethod::RegisterTouched => self.curve_ns(Curve::HostUnregister, bytes),
        }
    }

    /// Time to obtain `bytes` of fresh pageable memory and touch every page, ns (the
    /// `malloc_touch_us` column).
    pub fn malloc_touch_ns(&self, bytes: u64) -> f64 {
        self.curve_ns(Curve::MallocTouch, bytes)
    }
}

fn csv_line(e: &csv::Error) -> u64 {
    e.position().map_or(0, |p| p.line())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-6 * a.abs().max(b.abs()).max(1.0)
    }

    #[test]
    fn savings_by_method_use_the_registered_column() {
        let m = CostModel::builtin();
        let mib = 1u64 << 20;
        // 1 MiB: pinned H2D 39.04 GB/s, registered 39.28 GB/s, pageable 14.41 GB/s.
        let reg = m.transfer_saving_ns_by(Direction::HtoD, mib, PinMethod::RegisterTouched);
        assert!(close(reg, mib as f64 / 14.41 - mib as f64 / 39.28), "{reg}");
        let alloc = m.transfer_saving_ns_by(Direction::HtoD, mib, PinMethod::MallocHost);
        assert!(close(alloc, m.transfer_saving_ns(Direction::HtoD, mib)));
        assert!(reg > alloc);
        // Device to host has no registered column: the pinned one.
        assert!(close(
            m.transfer_saving_ns_by(Direction::DtoH, mib, PinMethod::RegisterTouched),
            m.transfer_saving_ns(Direction::DtoH, mib)
        ));
        assert_eq!(CostModel::page_table_bytes(1 << 30), 2 << 20);
        assert_eq!(CostModel::page_table_bytes(1), 8);
    }

    #[test]
    fn builtin_matches_the_measured_table_at_measured_sizes() {
        let m = CostModel::builtin();
        assert_eq!(m.points().len(), 10);
        // 1 MiB pageable H2D at 14.41 GB/s; pinned at 39.04 GB/s.
        let mib = 1u64 << 20;
        assert!(close(
            m.transfer_ns(Direction::HtoD, mib, false),
            mib as f64 / 14.41
        ));
        assert!(close(
            m.transfer_ns(Direction::HtoD, mib, true),
            mib as f64 / 39.04
        ));
        assert!(close(
            m.transfer_ns(Direction::DtoH, mib, false),
            mib as f64 / 9.95
        ));
        assert!(close(m.pin_cost_ns(mib, PinMethod::MallocHost), 443.6e3));
        assert!(close(
            m.pin_cost_ns(mib, PinMethod::RegisterTouched),
            179.6e3
        ));
        assert!(close(m.unpin_cost_ns(mib, PinMethod::MallocHost), 183.8e3));
        assert!(close(
            m.unpin_cost_ns(mib, PinMethod::RegisterTouched),
            88.2e3
        ));
        assert!(close(m.malloc_touch_ns(mib), 369.8e3));
        // Small copies: pinning does not help host-to-device at 4 KiB.
        assert!(m.transfer_saving_ns(Direction::HtoD, 4096) < 0.0);
        assert!(m.transfer_saving_ns(Direction::HtoD, 64 << 20) > 0.0);
    }

    #[test]
    fn interpolation_is_log_log_and_extrapolation_is_sane() {
        let m = CostModel::builtin();
        let (a, b) = (1u64 << 20, 4u64 << 20);
        let ta = m.transfer_ns(Direction::HtoD, a, true);
        let tb = m.transfer_ns(Direction::HtoD, b, true);
        // 2 MiB is halfway in log(size): the time is the geometric mean.
        let mid = m.transfer_ns(Direction::HtoD, 2 << 20, true);
        assert!(close(mid, (ta * tb).sqrt()));
        assert!(ta < mid && mid < tb);
        // Below the smallest size: the smallest size's time (latency floor).
        let floor = m.transfer_ns(Direction::HtoD, 4096, false);
        assert!(close(m.transfer_ns(Direction::HtoD, 1, false), floor));
        assert_eq!(m.transfer_ns(Direction::HtoD, 0, false), 0.0);
        // Above the largest: linear in size at the last bandwidth.
        let gib = 1u64 << 30;
        let t1 = m.transfer_ns(Direction::HtoD, gib, true);
        assert!(close(
            m.transfer_ns(Direction::HtoD, 4 * gib, true),
            4.0 * t1
        ));
        assert!(close(
            m.pin_cost_ns(8 * gib, PinMethod::MallocHost),
            8.0 * 281307.4e3
        ));
        // Device-to-device does not depend on pinning.
        assert_eq!(m.transfer_saving_ns(Direction::DtoD, gib), 0.0);
        assert!(close(
            m.transfer_ns_registered(Direction::HtoD, gib),
            gib as f64 / 55.17
        ));
    }

    #[test]
    fn csv_round_trips() {
        let m = CostModel::builtin();
        let back = CostModel::from_csv_str(&m.to_csv(), "round trip").unwrap();
        assert_eq!(back.points(), m.points());
    }

    #[test]
    fn bad_calibrations_say_what_and_where() {
        let header = COLUMNS.join(",");
        let err = |text: &str| {
            CostModel::from_csv_str(text, "test.csv")
                .unwrap_err()
                .to_string()
        };
        assert!(err("size_bytes,pinned_h2d_GBps\n4096,1\n")
            .contains("missing column `pageable_h2d_GBps`"));
        let e = err(&format!(
            "{header}\n4096,1,1,1,1,1,1,1,1,1,1\n2048,1,1,1,1,1,1,1,1,1,1\n"
        ));
        assert!(
            e.contains("line 3") && e.contains("larger than the row before"),
            "{e}"
        );
        let e = err(&format!("# c\n{header}\n4096,1,1,1,1,1,-1,1,1,1,1\n"));
        assert!(
            e.contains("line 3") && e.contains("mallochost_us must be a positive"),
            "{e}"
        );
        let e = err(&format!("{header}\n4096,fast,1,1,1,1,1,1,1,1,1\n"));
        assert!(e.contains("line 2"), "{e}");
        let e = err(&format!("{header}\n4096,1,1\n"));
        assert!(e.contains("line 2"), "{e}");
        assert!(err(&format!("{header}\n")).contains("no measured sizes"));
        let e = CostModel::from_csv_file("/nonexistent/cal.csv")
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/cal.csv"), "{e}");
    }
}
