//! Where the engine's threads run and where its memory lives: the host's NUMA topology (read from
//! `/sys/devices/system/node`) and a placement policy applied through the OS.
//!
//! - `none`: the OS schedules threads and places memory as it likes.
//! - `pin`: worker `i` of the engine's pool is bound to the `i`-th CPU of the host (round robin).
//! - `interleave`: memory allocated from here on is interleaved page by page over every node; threads are
//!   left to the scheduler.
//! - `node=N`: workers are bound to node N's CPUs and memory is taken from node N only.
//!
//! On a one-node machine every policy still applies, and [`Applied`] says that there is one node.

use std::{fmt, path::Path, str::FromStr};

/// A placement policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Placement {
    /// Leave placement to the OS.
    #[default]
    None,
    /// Bind each worker to one CPU.
    Pin,
    /// Interleave memory over every node.
    Interleave,
    /// Workers on this node's CPUs, memory from this node.
    Node(u32),
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placement::None => f.write_str("none"),
            Placement::Pin => f.write_str("pin"),
            Placement::Interleave => f.write_str("interleave"),
            Placement::Node(n) => write!(f, "node={n}"),
        }
    }
}

/// A policy that does not parse or cannot be applied here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// Not one of the policies.
    #[error("unknown placement policy `{0}`: use none, pin, interleave or node=N")]
    Unknown(String),
    /// `node=N` names a node this host does not have.
    #[error("NUMA node {node} does not exist: this host has {count} node(s) ({ids})")]
    NoSuchNode {
        /// The node asked for.
        node: u32,
        /// How many nodes there are.
        count: usize,
        /// Their ids.
        ids: String,
    },
    /// The OS refused.
    #[error("cannot apply placement `{policy}`: {reason}")]
    Os {
        /// The policy.
        policy: Placement,
        /// What the OS said.
        reason: String,
    },
}

impl FromStr for Placement {
    type Err = PlacementError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "none" => Ok(Placement::None),
            "pin" => Ok(Placement::Pin),
            "interleave" => Ok(Placement::Interleave),
            other => other
                .strip_prefix("node=")
                .and_then(|n| n.parse().ok())
                .map(Placement::Node)
                .ok_or_else(|| PlacementError::Unknown(other.to_owned())),
        }
    }
}

/// One NUMA node and its CPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Its id.
    pub id: u32,
    /// Its online CPUs.
    pub cpus: Vec<usize>,
}

/// The host's nodes, in id order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// At least one node.
    pub nodes: Vec<Node>,
}

impl Topology {
    /// This host's topology; one node with every available CPU when `/sys` does not tell.
    pub fn host() -> Topology {
        Topology::read(Path::new("/sys/devices/system/node")).unwrap_or_else(|| {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get());
            Topology {
                nodes: vec![Node {
                    id: 0,
                    cpus: (0..n).collect(),
                }],
            }
        })
    }

    /// The topology under a sysfs `node` folder (`nodeN/cpulist` files); `None` when it holds no node.
    pub fn read(dir: &Path) -> Option<Topology> {
        let mut nodes: Vec<Node> = std::fs::read_dir(dir)
            .ok()?
            .filter_map(|entry| {
                let entry = entry.ok()?;
                let name = entry.file_name().into_string().ok()?;
                let id: u32 = name.strip_prefix("node")?.parse().ok()?;
                let list = std::fs::read_to_string(entry.path().join("cpulist")).ok()?;
                Some(Node {
                    id,
                    cpus: parse_cpu_list(&list)?,
                })
            })
            .collect();
        nodes.sort_by_key(|n| n.id);
        (!nodes.is_empty()).then_some(Topology { nodes })
    }

    /// Every CPU of every node, in node order.
    pub fn cpus(&self) -> Vec<usize> {
        self.nodes
            .iter()
            .flat_map(|n| n.cpus.iter().copied())
            .collect()
    }

    fn node(&self, id: u32) -> Result<&Node, PlacementError> {
        self.nodes
            .iter()
            .find(|n| n.id == id)
            .ok_or_else(|| PlacementError::NoSuchNode {
                node: id,
                count: self.nodes.len(),
                ids: self
                    .nodes
                    .iter()
                    .map(|n| n.id.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

/// A kernel CPU list such as `0-3,8,10-11`; `None` when malformed.
pub fn parse_cpu_list(list: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 1 << 16 {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

/// A policy in effect: what the pool's workers are bound to, and how to describe it in results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The policy.
    pub policy: Placement,
    /// CPUs worker `i` is bound to round robin (empty: not bound).
    pub worker_cpus: Vec<usize>,
    /// Nodes of the host.
    pub nodes: usize,
}

impl fmt::Display for Applied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({} NUMA node{})",
            self.policy,
            self.nodes,
            if self.nodes == 1 { "" } else { "s" }
        )
    }
}

/// Applies `policy`'s memory part to this process (allocations from here on) and returns the CPUs the
/// engine's workers are to be bound to.
///
/// # Errors
/// [`PlacementError::NoSuchNode`] for a node the host lacks; [`PlacementError::Os`] when the OS refuses
/// (or is not Linux, for any policy but `none`).
pub fn apply(policy: Placement, topology: &Topology) -> Result<Applied, PlacementError> {
    let nodes = topology.nodes.len();
    let worker_cpus = match policy {
        Placement::None => Vec::new(),
        Placement::Pin => topology.cpus(),
        Placement::Interleave => {
            let ids: Vec<u32> = topology.nodes.iter().map(|n| n.id).collect();
            os::set_memory_policy(os::MPOL_INTERLEAVE, &ids)
                .map_err(|reason| PlacementError::Os { policy, reason })?;
            Vec::new()
        }
        Placement::Node(id) => {
            let node = topology.node(id)?;
            os::set_memory_policy(os::MPOL_BIND, &[id])
                .map_err(|reason| PlacementError::Os { policy, reason })?;
            node.cpus.clone()
        }
    };
    Ok(Applied {
        policy,
        worker_cpus,
        nodes,
    })
}

/// Binds the calling thread (worker `index` of a pool) to its CPU under `applied`; does nothing when the
/// policy binds no thread.
///
/// # Errors
/// What the OS said, when it refused.
pub fn bind_worker(applied: &Applied, index: usize) -> Result<(), String> {
    if applied.worker_cpus.is_empty() {
        return Ok(());
    }
    let cpu = applied.worker_cpus[index % applied.worker_cpus.len()];
    os::bind_current_thread(cpu)
}

/// The CPUs the calling thread may run on.
pub fn current_thread_cpus() -> Vec<usize> {
    os::current_thread_cpus()
}

#[cfg(target_os = "linux")]
mod os;

#[cfg(not(target_os = "linux"))]
mod os {
    //! Placement needs Linux: elsewhere every policy but `none` is refused.
    pub(super) const MPOL_BIND: i32 = 2;
    pub(super) const MPOL_INTERLEAVE: i32 = 3;

    pub(super) fn set_memory_policy(_: i32, _: &[u32]) -> Result<(), String> {
        Err("memory placement needs Linux".into())
    }

    pub(super) fn bind_current_thread(_: usize) -> Result<(), String> {
        Err("binding threads to CPUs needs Linux".into())
    }

    pub(super) fn current_thread_cpus() -> Vec<usize> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_and_print_back() {
        for text in ["none", "pin", "interleave", "node=0", "node=3"] {
            let p: Placement = text.parse().expect(text);
            assert_eq!(p.to_string(), text);
        }
        for bad in ["", "pinned", "node=", "node=x", "node=-1"] {
            let err = bad.parse::<Placement>().expect_err(bad).to_string();
            assert!(err.contains("none, pin, interleave or node=N"), "{err}");
        }
    }

    #[test]
    fn cpu_lists_parse_like_the_kernel_writes_them() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("5"), Some(vec![5]));
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("a"), None);
    }

    #[test]
    fn a_sysfs_tree_reads_into_nodes_and_unknown_nodes_are_refused() {
        let dir = std::env::temp_dir().join(format!("strata-numa-{}", std::process::id()));
        for (node, list) in [("node1", "2-3\n"), ("node0", "0-1\n")] {
            std::fs::create_dir_all(dir.join(node)).expect("mkdir");
            std::fs::write(dir.join(node).join("cpulist"), list).expect("write");
        }
        std::fs::create_dir_all(dir.join("power")).expect("mkdir");
        let topo = Topology::read(&dir).expect("two nodes");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(topo.nodes.len(), 2);
        assert_eq!(
            topo.nodes[0],
            Node {
                id: 0,
                cpus: vec![0, 1]
            }
        );
        assert_eq!(topo.cpus(), [0, 1, 2, 3]);
        let err = apply(Placement::Node(7), &topo)
            .expect_err("no node 7")
            .to_string();
        assert!(
            err.contains("NUMA node 7 does not exist") && err.contains("0, 1"),
            "{err}"
        );
        let pinned = apply(Placement::Pin, &topo).expect("pin");
        assert_eq!(pinned.worker_cpus, [0, 1, 2, 3]);
        assert_eq!(pinned.to_string(), "pin (2 NUMA nodes)");
        assert!(Topology::read(&dir.join("missing")).is_none());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_pinned_thread_runs_only_on_its_cpu() {
        let topo = Topology::host();
        let applied = apply(Placement::Pin, &topo).expect("pin applies");
        let allowed = current_thread_cpus();
        let cpu = *allowed.first().expect("some CPU");
        let index = applied
            .worker_cpus
            .iter()
            .position(|&c| c == cpu)
            .expect("an allowed CPU is a host CPU");
        let seen = std::thread::spawn(move || {
            bind_worker(&applied, index).expect("binds");
            current_thread_cpus()
        })
        .join()
        .expect("thread");
        assert_eq!(seen, [cpu]);
    }
}
