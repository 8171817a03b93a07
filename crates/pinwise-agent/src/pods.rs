//! Kubernetes namespace and pod name from a pod UID, without asking the API server.
//!
//! A cgroup path holds a pod's UID only ([`crate::cgroup`]). The kubelet keeps each pod's
//! container logs in a directory named `<namespace>_<pod name>_<pod UID>` under
//! `/var/log/pods` (its standard layout, the same on containerd and CRI-O nodes; names and
//! namespaces are DNS labels, so they hold no `_`). [`PodResolver`] lists that directory
//! (the agent's `--pods-dir`; in the DaemonSet the host's `/var/log/pods`, mounted
//! read-only) and caches what it finds. An unknown UID makes it list the directory again,
//! at most once per [`RESCAN_INTERVAL`]; each listing replaces the cache, so it holds only
//! pods that still have a directory and is as large as the directory.
//!
//! What this cannot do: a pod whose log directory was removed (or a kubelet configured
//! with another `--pod-logs-dir`, unless `--pods-dir` names it) has no namespace or name;
//! its series carry the UID only.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::process::PodName;

/// Where the kubelet keeps pod log directories by default.
pub const DEFAULT_PODS_DIR: &str = "/var/log/pods";

/// Least time between two listings of the pods directory.
pub const RESCAN_INTERVAL: Duration = Duration::from_secs(1);

/// `(namespace, name, uid)` from a pod log directory's name
/// (`<namespace>_<name>_<uid>`); `None` for any other name.
pub fn parse_dir_name(name: &str) -> Option<(&str, &str, &str)> {
    let mut parts = name.split('_');
    let (ns, pod, uid) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || ns.is_empty() || pod.is_empty() || uid.is_empty() {
        return None;
    }
    Some((ns, pod, uid))
}

/// Pod UIDs to namespaces and names, from a pods directory (see the module docs).
#[derive(Debug)]
pub struct PodResolver {
    root: Option<PathBuf>,
    cache: HashMap<String, PodName>,
    last_scan: Option<Instant>,
    /// Listings of the directory so far.
    pub scans: u64,
}

impl PodResolver {
    /// A resolver over `root` (`None`: every UID stays unresolved).
    pub fn new(root: Option<PathBuf>) -> Self {
        PodResolver {
            root,
            cache: HashMap::new(),
            last_scan: None,
            scans: 0,
        }
    }

    /// The namespace and name of the pod with this UID, if its directory is there.
    pub fn resolve(&mut self, uid: &str) -> Option<PodName> {
        if let Some(p) = self.cache.get(uid) {
            return Some(p.clone());
        }
        let due = self
            .last_scan
            .is_none_or(|t| t.elapsed() >= RESCAN_INTERVAL);
        if !due {
            return None;
        }
        self.scan();
        self.cache.get(uid).cloned()
    }

    /// Lists the directory now, replacing the cache.
    pub fn scan(&mut self) {
        let Some(root) = &self.root else {
            return;
        };
        self.last_scan = Some(Instant::now());
        self.scans += 1;
        let Ok(entries) = std::fs::read_dir(root) else {
            tracing::debug!("pods directory {}: cannot list it", root.display());
            return;
        };
        let mut cache = HashMap::new();
        for e in entries.flatten() {
            let name = e.file_name();
            let Some((ns, pod, uid)) = name.to_str().and_then(parse_dir_name) else {
                continue;
            };
            cache.insert(
                uid.to_string(),
                PodName {
                    namespace: ns.to_string(),
                    name: pod.to_string(),
                },
            );
        }
        self.cache = cache;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0b8d8b36-4bd1-4a8a-9d3c-2a7f1e6b5c4d";

    #[test]
    fn directory_names_are_namespace_name_uid() {
        assert_eq!(
            parse_dir_name(&format!("ml-team_trainer-7f9c-0_{UID}")),
            Some(("ml-team", "trainer-7f9c-0", UID))
        );
        // Static pods: the UID is a config hash.
        assert_eq!(
            parse_dir_name("kube-system_etcd-node1_5f0c0a7e2b1d4c3e9a8b7c6d5e4f3a2b"),
            Some((
                "kube-system",
                "etcd-node1",
                "5f0c0a7e2b1d4c3e9a8b7c6d5e4f3a2b"
            ))
        );
        for bad in ["", "a_b", "a_b_c_d", "_b_c", "a__c", "a_b_", "plainfile"] {
            assert_eq!(parse_dir_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn resolves_from_a_fake_pods_tree_rescans_for_new_pods_and_forgets_removed_ones() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(format!("ml_trainer-0_{UID}"))).unwrap();
        std::fs::create_dir(dir.path().join("not-a-pod-dir")).unwrap();
        let mut r = PodResolver::new(Some(dir.path().to_path_buf()));
        let p = r.resolve(UID).expect("found");
        assert_eq!((p.namespace.as_str(), p.name.as_str()), ("ml", "trainer-0"));
        assert_eq!(r.scans, 1);
        // Cached: no new listing.
        r.resolve(UID).unwrap();
        assert_eq!(r.scans, 1);
        // A UID not there: one listing, then none until RESCAN_INTERVAL has passed.
        let other = "11111111-2222-3333-4444-555555555555";
        assert_eq!(r.resolve(other), None);
        assert_eq!(r.scans, 1, "listed less than RESCAN_INTERVAL ago");
        std::fs::create_dir(dir.path().join(format!("default_late_{other}"))).unwrap();
        std::thread::sleep(RESCAN_INTERVAL);
        assert_eq!(r.resolve(other).map(|p| p.name), Some("late".to_string()));
        assert_eq!(r.scans, 2);
        // Removed pods leave the cache at the next listing.
        std::fs::remove_dir(dir.path().join(format!("ml_trainer-0_{UID}"))).unwrap();
        r.scan();
        assert_eq!(r.resolve(UID), None);
        // No directory: nothing resolves, nothing fails.
        assert_eq!(PodResolver::new(None).resolve(UID), None);
        let mut missing = PodResolver::new(Some(dir.path().join("absent")));
        assert_eq!(missing.resolve(UID), None);
    }
}
