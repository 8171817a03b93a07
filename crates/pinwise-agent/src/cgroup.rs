//! Who a process belongs to, from its cgroup path: the container id (Docker, containerd,
//! CRI-O, Podman), and for Kubernetes the pod UID and QoS class.
//!
//! Only what the path itself says: Kubernetes namespaces and pod names are not in cgroup
//! paths (they live in the API server); [`crate::pods`] finds them from the pod UID.

/// What a cgroup path says about the container and pod of a process.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct CgroupInfo {
    /// The cgroup v2 path (or the v1 path of the first hierarchy listed), e.g.
    /// `/kubepods.slice/.../cri-containerd-<id>.scope`; empty when unknown.
    pub path: String,
    /// The container id (64 hex digits) when the path holds one.
    pub container_id: Option<String>,
    /// The Kubernetes pod UID (with dashes) when the path holds one.
    pub pod_uid: Option<String>,
    /// The Kubernetes QoS class: `guaranteed`, `burstable` or `besteffort`.
    pub qos: Option<&'static str>,
}

/// Parses the contents of `/proc/PID/cgroup`: the cgroup v2 line (`0::/path`), or else
/// the first v1 line.
pub fn parse_proc_cgroup(text: &str) -> CgroupInfo {
    let mut first_v1 = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(_controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if id == "0" {
            return parse_path(path);
        }
        first_v1.get_or_insert(path);
    }
    first_v1.map(parse_path).unwrap_or_default()
}

/// Parses one cgroup path.
pub fn parse_path(path: &str) -> CgroupInfo {
    let mut info = CgroupInfo {
        path: path.to_string(),
        ..CgroupInfo::default()
    };
    let mut under_kubepods = false;
    for component in path.split('/').filter(|c| !c.is_empty()) {
        let name = component
            .strip_suffix(".scope")
            .or_else(|| component.strip_suffix(".slice"))
            .unwrap_or(component);
        if name == "kubepods" || name.starts_with("kubepods-") || name.starts_with("kubepods.") {
            under_kubepods = true;
        }
        if under_kubepods {
            for (word, qos) in [("burstable", "burstable"), ("besteffort", "besteffort")] {
                if name == word || name == format!("kubepods-{word}") {
                    info.qos = Some(qos);
                }
            }
            if let Some(uid) = pod_uid(name) {
                info.pod_uid = Some(uid);
                info.qos.get_or_insert("guaranteed");
                continue;
            }
        }
        if let Some(id) = container_id(name) {
            info.container_id = Some(id);
        }
    }
    info
}

/// `pod<uid>`, `kubepods-besteffort-pod<uid_with_underscores>`, `kubepods-pod<uid>`.
fn pod_uid(name: &str) -> Option<String> {
    let at = name.rfind("pod")?;
    let before = &name[..at];
    if !(before.is_empty() || before.ends_with('-')) {
        return None;
    }
    let uid = name[at + 3..].replace('_', "-");
    let groups: Vec<&str> = uid.split('-').collect();
    let shape = [8, 4, 4, 4, 12];
    let ok = groups.len() == 5
        && groups
            .iter()
            .zip(shape)
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()));
    ok.then_some(uid)
}

/// A 64-hex-digit container id, bare or after a runtime prefix (`docker-`,
/// `cri-containerd-`, `crio-`, `libpod-`, ...).
fn container_id(name: &str) -> Option<String> {
    let id = match name.rfind('-') {
        Some(at) => &name[at + 1..],
        None => name,
    };
    (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "4f1b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b";
    const UID: &str = "0b8d8b36-4bd1-4a8a-9d3c-2a7f1e6b5c4d";

    fn uid_underscored() -> String {
        UID.replace('-', "_")
    }

    #[test]
    fn docker_cgroupfs_and_systemd_drivers() {
        let a = parse_path(&format!("/docker/{ID}"));
        assert_eq!(a.container_id.as_deref(), Some(ID));
        assert_eq!(a.pod_uid, None);
        let b = parse_path(&format!("/system.slice/docker-{ID}.scope"));
        assert_eq!(b.container_id.as_deref(), Some(ID));
        assert_eq!(b.qos, None);
    }

    #[test]
    fn kubernetes_containerd_systemd_burstable() {
        let p = format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/\
             cri-containerd-{ID}.scope",
            uid_underscored()
        );
        let i = parse_path(&p);
        assert_eq!(i.container_id.as_deref(), Some(ID));
        assert_eq!(i.pod_uid.as_deref(), Some(UID));
        assert_eq!(i.qos, Some("burstable"));
        assert_eq!(i.path, p);
    }

    #[test]
    fn kubernetes_crio_besteffort() {
        let p = format!(
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice/\
             crio-{ID}.scope",
            uid_underscored()
        );
        let i = parse_path(&p);
        assert_eq!(i.container_id.as_deref(), Some(ID));
        assert_eq!(i.pod_uid.as_deref(), Some(UID));
        assert_eq!(i.qos, Some("besteffort"));
    }

    #[test]
    fn kubernetes_cgroupfs_driver_and_guaranteed_pods() {
        let i = parse_path(&format!("/kubepods/burstable/pod{UID}/{ID}"));
        assert_eq!(i.container_id.as_deref(), Some(ID));
        assert_eq!(i.pod_uid.as_deref(), Some(UID));
        assert_eq!(i.qos, Some("burstable"));
        let g = parse_path(&format!("/kubepods/pod{UID}/{ID}"));
        assert_eq!(g.pod_uid.as_deref(), Some(UID));
        assert_eq!(g.qos, Some("guaranteed"));
        let gs = parse_path(&format!(
            "/kubepods.slice/kubepods-pod{}.slice/cri-containerd-{ID}.scope",
            uid_underscored()
        ));
        assert_eq!(gs.pod_uid.as_deref(), Some(UID));
        assert_eq!(gs.qos, Some("guaranteed"));
        assert_eq!(gs.container_id.as_deref(), Some(ID));
    }

    #[test]
    fn podman_and_plain_systemd_slices() {
        let p = parse_path(&format!("/machine.slice/libpod-{ID}.scope/container"));
        assert_eq!(p.container_id.as_deref(), Some(ID));
        for plain in [
            "/system.slice/ssh.service",
            "/user.slice/user-1000.slice/session-3.scope",
            "/user.slice/user-1000.slice/user@1000.service/app.slice/podcast.scope",
            "/",
            "",
        ] {
            let i = parse_path(plain);
            assert_eq!(i.container_id, None, "{plain}");
            assert_eq!(i.pod_uid, None, "{plain}");
            assert_eq!(i.qos, None, "{plain}");
        }
        // "pod" inside a word, or a non-UID after it, is no pod.
        assert_eq!(parse_path("/kubepods/burstable/podcast").pod_uid, None);
        // A short hex name is no container id.
        assert_eq!(parse_path("/docker/abc123").container_id, None);
    }

    #[test]
    fn proc_cgroup_v2_line_wins_over_v1_lines() {
        let v2 = format!("0::/system.slice/docker-{ID}.scope\n");
        assert_eq!(parse_proc_cgroup(&v2).container_id.as_deref(), Some(ID));
        let hybrid = format!("12:memory:/docker/{ID}\n11:cpu:/other\n0::/init.scope\n");
        let i = parse_proc_cgroup(&hybrid);
        assert_eq!(i.path, "/init.scope");
        let v1 = format!("12:memory:/docker/{ID}\n11:cpu,cpuacct:/docker/{ID}\n");
        assert_eq!(parse_proc_cgroup(&v1).container_id.as_deref(), Some(ID));
        assert_eq!(parse_proc_cgroup("garbage"), CgroupInfo::default());
    }
}

/// Finds cgroup v2 paths from cgroup ids (the id BPF's `bpf_get_current_cgroup_id` gives
/// is the inode number of the cgroup's directory in the v2 hierarchy), by walking the
/// hierarchy once per unknown id; what a walk sees is cached (at most [`MAX_CACHED`]
/// entries, then the cache starts over).
#[derive(Debug)]
pub struct CgroupResolver {
    root: Option<std::path::PathBuf>,
    cache: std::collections::HashMap<u64, String>,
}

/// Most cgroup ids [`CgroupResolver`] remembers.
pub const MAX_CACHED: usize = 65_536;

/// Where the cgroup v2 hierarchy is mounted, from `/proc/mounts`.
pub fn cgroup2_mount() -> Option<std::path::PathBuf> {
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(2) == Some(&"cgroup2")).then(|| std::path::PathBuf::from(f[1]))
    })
}

impl CgroupResolver {
    /// A resolver over the hierarchy mounted at `root` (None: none known, ids stay unknown).
    pub fn new(root: Option<std::path::PathBuf>) -> Self {
        CgroupResolver {
            root,
            cache: std::collections::HashMap::new(),
        }
    }

    /// The path (relative to the hierarchy's root, with a leading `/`) of cgroup `id`.
    pub fn path(&mut self, id: u64) -> Option<String> {
        if let Some(p) = self.cache.get(&id) {
            return Some(p.clone());
        }
        let root = self.root.clone()?;
        if self.cache.len() >= MAX_CACHED {
            self.cache.clear();
        }
        self.walk(&root, &root, 0);
        self.cache.get(&id).cloned()
    }

    fn walk(&mut self, root: &std::path::Path, dir: &std::path::Path, depth: usize) {
        use std::os::unix::fs::MetadataExt;
        if depth > 32 {
            return;
        }
        if let Ok(meta) = std::fs::metadata(dir) {
            let rel = dir
                .strip_prefix(root)
                .map_or(String::new(), |r| r.display().to_string());
            self.cache.insert(meta.ino(), format!("/{rel}"));
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                self.walk(root, &e.path(), depth + 1);
            }
        }
    }
}

#[cfg(test)]
mod resolver_tests {
    use super::*;

    #[test]
    fn ids_are_directory_inodes_relative_to_the_root() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let leaf = dir.path().join("kubepods.slice/pod-x");
        std::fs::create_dir_all(&leaf).unwrap();
        let id = std::fs::metadata(&leaf).unwrap().ino();
        let mut r = CgroupResolver::new(Some(dir.path().to_path_buf()));
        assert_eq!(r.path(id).as_deref(), Some("/kubepods.slice/pod-x"));
        let root_id = std::fs::metadata(dir.path()).unwrap().ino();
        assert_eq!(r.path(root_id).as_deref(), Some("/"));
        assert_eq!(r.path(u64::MAX), None);
        assert_eq!(CgroupResolver::new(None).path(id), None);
    }
}
