//! A `mosquitto` child process on 127.0.0.1, with a configuration of the test's.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;

use super::peers::{endpoint_for, free_port};
use super::proc::{installed, Server, ServerProcess};

/// A `mosquitto` broker on 127.0.0.1, killed (SIGKILL) and reaped on drop; its configuration
/// file is removed then.
pub struct Mosquitto {
    binary: PathBuf,
    port: u16,
    config: PathBuf,
    process: ServerProcess,
}

impl Mosquitto {
    /// None when mosquitto is not installed. `extra` is added to its configuration (after the
    /// listener line), e.g. `"allow_anonymous false"`. Panics if it does not listen within 10 s.
    pub fn start(extra: &str) -> Option<Mosquitto> {
        let binary = installed("mosquitto")?;
        let port = free_port();
        let config = std::env::temp_dir().join(format!(
            "relink-test-mosquitto-{}-{port}.conf",
            std::process::id()
        ));
        let allow = if extra.contains("allow_anonymous") {
            ""
        } else {
            "allow_anonymous true\n"
        };
        std::fs::write(
            &config,
            format!("listener {port} 127.0.0.1\n{allow}{extra}\n"),
        )
        .expect("write the mosquitto configuration");
        let mut m = Mosquitto {
            binary,
            port,
            config,
            process: ServerProcess::default(),
        };
        m.launch();
        Some(m)
    }

    /// `tcp://127.0.0.1:PORT`
    pub fn endpoint(&self) -> String {
        endpoint_for(self.port)
    }
}

impl Server for Mosquitto {
    fn process(&self) -> &ServerProcess {
        &self.process
    }

    fn process_mut(&mut self) -> &mut ServerProcess {
        &mut self.process
    }

    fn launch(&mut self) {
        let mut cmd = Command::new(&self.binary);
        cmd.arg("-c").arg(&self.config);
        let port = self.port;
        let serves = || TcpStream::connect(("127.0.0.1", port)).is_ok();
        if let Err(e) = self.process.launch(cmd, serves) {
            panic!("mosquitto on port {port}: {e}");
        }
    }
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_file(&self.config);
    }
}
