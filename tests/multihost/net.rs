//! Hosts on one machine: a Linux bridge in the root namespace and one network namespace per host,
//! each joined to the bridge by a veth pair and given its own address. Everything is removed on drop.

use std::{
    net::Ipv4Addr,
    process::{Command, Stdio},
};

/// The bridge and the namespaces of one test run.
pub(crate) struct Network {
    prefix: String,
    bridge: String,
    subnet: [u8; 3],
    hosts: Vec<Host>,
}

/// One namespaced host.
#[derive(Debug, Clone)]
pub(crate) struct Host {
    /// Its network namespace.
    pub(crate) ns: String,
    /// The root side of its veth pair (on the bridge).
    veth: String,
    /// Its address.
    pub(crate) ip: Ipv4Addr,
}

/// Runs `ip ARGS`, failing with its stderr.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running `ip`: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Network {
    /// A bridge with the root namespace at `.1` of a /24 picked from the process id.
    pub(crate) fn create() -> Result<Self, String> {
        let id = std::process::id() % 1000;
        let prefix = format!("sm{id}");
        let subnet = [10, 231, u8::try_from(id % 250 + 1).expect("below 251")];
        let net = Self {
            bridge: format!("{prefix}br"),
            prefix,
            subnet,
            hosts: Vec::new(),
        };
        // A bridge left over by a killed run of the same id goes first.
        let _ = ip(&["link", "del", &net.bridge]);
        ip(&["link", "add", &net.bridge, "type", "bridge"])?;
        let addr = format!("{}/24", net.root_ip());
        ip(&["addr", "add", &addr, "dev", &net.bridge])?;
        ip(&["link", "set", &net.bridge, "up"])?;
        Ok(net)
    }

    /// The root namespace's address on the bridge.
    pub(crate) fn root_ip(&self) -> Ipv4Addr {
        let [a, b, c] = self.subnet;
        Ipv4Addr::new(a, b, c, 1)
    }

    /// A new namespaced host named `name` (a few letters), at the next address.
    pub(crate) fn add_host(&mut self, name: &str) -> Result<Host, String> {
        let [a, b, c] = self.subnet;
        let host = Host {
            ns: format!("{}-{name}", self.prefix),
            veth: format!("{}{name}", self.prefix),
            ip: Ipv4Addr::new(
                a,
                b,
                c,
                u8::try_from(self.hosts.len() + 2).expect("few hosts"),
            ),
        };
        let _ = ip(&["netns", "del", &host.ns]);
        ip(&["netns", "add", &host.ns])?;
        self.hosts.push(host.clone());
        ip(&[
            "link", "add", &host.veth, "type", "veth", "peer", "name", "eth0", "netns", &host.ns,
        ])?;
        ip(&["link", "set", &host.veth, "master", &self.bridge, "up"])?;
        let addr = format!("{}/24", host.ip);
        ip(&["-n", &host.ns, "addr", "add", &addr, "dev", "eth0"])?;
        ip(&["-n", &host.ns, "link", "set", "eth0", "up"])?;
        ip(&["-n", &host.ns, "link", "set", "lo", "up"])?;
        Ok(host)
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        for host in &self.hosts {
            let _ = ip(&["link", "del", &host.veth]);
            let _ = ip(&["netns", "del", &host.ns]);
        }
        let _ = ip(&["link", "del", &self.bridge]);
    }
}

impl Host {
    /// `program` to be run inside this host's namespace.
    pub(crate) fn command(&self, program: &str) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.ns, program]);
        command
    }

    /// Cuts the host off the network (its link on the bridge goes down).
    pub(crate) fn partition(&self) -> Result<(), String> {
        ip(&["link", "set", &self.veth, "down"])
    }

    /// Puts the host back on the network.
    pub(crate) fn heal(&self) -> Result<(), String> {
        ip(&["link", "set", &self.veth, "up"])
    }

    /// Runs `f` on a new thread that has entered this host's namespace: the sockets it opens (and a
    /// runtime it drives on that thread) live there.
    pub(crate) fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/var/run/netns/{}", self.ns);
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    enter_netns(&path);
                    f()
                })
                .join()
                .expect("the namespaced thread finishes")
        })
    }
}

/// Moves the calling thread into the network namespace at `path`.
fn enter_netns(path: &str) {
    use rustix::thread::{LinkNameSpaceType, move_into_link_name_space};
    use std::os::fd::AsFd;
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("opening {path}: {e}"));
    move_into_link_name_space(file.as_fd(), Some(LinkNameSpaceType::Network))
        .unwrap_or_else(|e| panic!("setns({path}): {e}"));
}

/// Whether this process may create namespaces (root with `ip` on the PATH).
pub(crate) fn can_create_namespaces() -> Result<(), String> {
    if !rustix::process::geteuid().is_root() {
        return Err("not root".into());
    }
    ip(&["netns", "list"]).map_err(|e| format!("`ip netns` unusable: {e}"))
}
