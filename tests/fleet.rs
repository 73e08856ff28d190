//! Running a fleet: links carry their names into log lines and handles, the pool answers
//! for all its links in one call, and failures no retry can fix are retried slowly.

mod util;

use std::time::Duration;

use relink::error::LinkError;
use relink::framing::Lines;
use relink::{Cause, IoPool, Link, State, Tls};
use util::logs::Logs;
use util::tls::{restartable_port, server_config, Pki, Serve, TlsKit, TlsServer, SERVER_NAME};
use util::*;

/// Bound on a link reaching a state.
const T: Duration = Duration::from_secs(10);

#[test]
fn a_captured_log_line_carries_the_link_name() {
    let _g = shared();
    let logs = Logs::capture();
    let link = Link::builder(refused_endpoint())
        .name("meter-17")
        .reconnect(|r| {
            r.backoff_base = ms(10);
            r.backoff_max = ms(20);
        })
        .build()
        .expect("build");
    let mut watch = Watch::new(&link);
    watch.until(T, |t| t.to == State::Backoff && t.cause == Cause::Refused);
    // Other tests' links log beside this one: the name tells them apart.
    let line = logs.wait_for("relink[meter-17]: Connecting -> Backoff (refused", T);
    assert!(
        line.is_some(),
        "no transition line names the link; seen: {:?}",
        logs.matching("Connecting -> Backoff")
    );
    assert!(
        logs.matching("dialling")
            .iter()
            .all(|l| l.contains("relink[")),
        "every dial line names its link"
    );
    watch.close(&link, T, "named link");
}

#[test]
fn a_link_without_a_name_is_named_after_its_endpoint() {
    let _g = shared();
    let endpoint = refused_endpoint();
    let link = Link::builder(&endpoint).build().expect("build");
    assert_eq!(link.name(), endpoint);
    assert_eq!(link.events().name(), endpoint);
    let named = Link::builder(&endpoint)
        .name("gw-1")
        .build()
        .expect("build");
    assert_eq!((named.name(), named.events().name()), ("gw-1", "gw-1"));
}

#[test]
fn a_pool_view_counts_links_per_state_and_names_the_worst() {
    let _g = shared();
    let pool = IoPool::new(2).expect("pool");
    let peer = Peer::start(Behaviour::Echo);
    let up: Vec<Link> = (0..3)
        .map(|i| {
            Link::builder(peer.endpoint())
                .name(format!("up-{i}"))
                .reconnect(|r| {
                    r.backoff_base = ms(10);
                    r.backoff_max = ms(50);
                    r.min_stable = ms(10);
                })
                .io_pool(&pool)
                .build()
                .expect("build")
        })
        .collect();
    let down: Vec<Link> = ["down-a", "down-b"]
        .iter()
        .map(|name| {
            Link::builder(refused_endpoint())
                .name(*name)
                .reconnect(|r| {
                    r.backoff_base = ms(10);
                    r.backoff_max = ms(50);
                })
                .io_pool(&pool)
                .build()
                .expect("build")
        })
        .collect();
    let settled = wait_for(T, || {
        let v = pool.view(10);
        (v.states.get(State::Ready) == 3 && v.longest_down.len() == 2).then_some(v)
    })
    .unwrap_or_else(|| panic!("no settled view; last: {}", pool.view(10)));
    assert_eq!((settled.threads, settled.links), (2, 5));
    let mut names: Vec<&str> = settled.longest_down.iter().map(|l| &*l.name).collect();
    names.sort_unstable();
    assert_eq!(names, ["down-a", "down-b"]);
    assert!(settled.most_reconnects.is_empty(), "{settled}");
    let top = pool.view(1);
    assert_eq!(top.longest_down.len(), 1, "{top}");
    assert!(top.longest_down[0].down_for >= settled.longest_down[1].down_for);

    // The peer restarts: the three come back, and the view names them by reconnects.
    let port = peer.port();
    peer.stop();
    let peer = Peer::start_on(port, Behaviour::Echo).expect("restart the peer");
    let back = wait_for(T, || {
        let v = pool.view(10);
        (v.totals.reconnects == 3 && v.states.get(State::Ready) == 3).then_some(v)
    })
    .unwrap_or_else(|| panic!("not all back; last: {}", pool.view(10)));
    let mut names: Vec<&str> = back.most_reconnects.iter().map(|l| &*l.name).collect();
    names.sort_unstable();
    assert_eq!(names, ["up-0", "up-1", "up-2"]);
    assert!(back.totals.connects >= 6, "{back}");
    for link in up.iter().chain(&down) {
        link.close(T);
    }
    assert_eq!(pool.view(10).links, 0);
    peer.stop();
}

/// Replaces `path` with `text` as rotation tools do: a new file renamed over the old one.
fn write(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, text).expect("write a credentials file");
    std::fs::rename(&tmp, path).expect("rename it into place");
}

#[test]
fn a_link_follows_rotated_credential_files_and_keeps_the_last_good_ones_when_new_ones_are_broken() {
    let _g = shared();
    let logs = Logs::capture();
    let old = TlsKit::new();
    let new = Pki::new();
    let (ca, cert, key) = (
        old.dir.join("link-ca.crt"),
        old.dir.join("link-client.crt"),
        old.dir.join("link-client.key"),
    );
    write(&ca, &old.pki.ca.cert);
    write(&cert, &old.pki.client.cert);
    write(&key, &old.pki.client.key);
    let port = restartable_port();
    let old_config = || server_config(&old.pki.server, Some(&old.pki.ca.cert));
    let server = TlsServer::start_on(port, old_config(), Serve::Echo);
    let link = Link::builder(format!("tcp://{SERVER_NAME}:{port}"))
        .name("rotating")
        .framing(Lines::new())
        .tls(Tls::new().ca_file(&ca).client_auth_files(&cert, &key))
        .reconnect(|r| {
            r.backoff_base = ms(20);
            r.backoff_max = ms(100);
            r.config_failure_retry = Some(ms(100));
        })
        .build()
        .expect("build");
    let mut w = Watch::new(&link);
    let echo = |w: &mut Watch, line: &str| {
        let seen = w.frames.len();
        link.send(line.to_string()).expect("send");
        assert!(w.frames_until(seen + 1, T), "no echo: {}", w.trace());
        assert_eq!(w.frames[seen], line.as_bytes());
    };
    w.until(T, |t| t.to == State::Ready);
    echo(&mut w, "with the first certificate");

    // A broken rotation (the key half-written), then a restart: the link comes back with the
    // last good credentials, and says so.
    write(&key, "-----BEGIN PRIVATE KEY-----\nnot base64 at all");
    drop(server);
    w.until(T, |t| t.from == State::Ready);
    let server = TlsServer::start_on(port, old_config(), Serve::Echo);
    w.until(T, |t| t.to == State::Ready);
    echo(&mut w, "with the last good certificate");
    assert!(
        w.errors
            .iter()
            .any(|e| matches!(e, LinkError::TlsCredentials(_))),
        "the broken file is reported: {}",
        w.trace()
    );

    // The whole rotation, and a server that accepts only the new certificate.
    drop(server);
    w.until(T, |t| t.from == State::Ready);
    write(&ca, &new.ca.cert);
    write(&cert, &new.client.cert);
    write(&key, &new.client.key);
    let _server = TlsServer::start_on(
        port,
        server_config(&new.server, Some(&new.ca.cert)),
        Serve::Echo,
    );
    w.until(T, |t| t.to == State::Ready);
    echo(&mut w, "with the rotated certificate");
    let m = link.metrics();
    assert_eq!((m.reconnects, m.tls_rejected), (2, 0), "{}", w.trace());
    // The transcript: what the link logged.
    for line in logs.matching("relink[rotating]") {
        eprintln!("{line}");
    }
    w.close(&link, T, "rotating link");
}

#[cfg(feature = "metrics")]
#[test]
fn the_metrics_export_counts_the_pools_links_by_state_and_their_connects() {
    let _g = shared();
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let text = recorder.handle();
    let pool = IoPool::new(1).expect("pool");
    let peer = Peer::start(Behaviour::Echo);
    let links: Vec<Link> = (0..2)
        .map(|_| {
            Link::builder(peer.endpoint())
                .io_pool(&pool)
                .build()
                .expect("build")
        })
        .collect();
    assert!(wait_until(T, || links
        .iter()
        .all(|l| l.state() == State::Ready)));
    let exporter = pool.export_metrics(relink::pool::MetricsExport::new("test"));
    metrics::with_local_recorder(&recorder, || exporter.flush());
    let text = text.render();
    for line in [
        "relink_links{pool=\"test\",state=\"Ready\"} 2",
        "relink_connects_total{pool=\"test\"} 2",
        "relink_abandoned_total{pool=\"test\",reason=\"expired\"} 0",
    ] {
        assert!(text.contains(line), "{line} not in\n{text}");
    }
    // Every reason is a series, those that came later included.
    for reason in relink::AbandonReason::ALL {
        let line = format!("relink_abandoned_total{{pool=\"test\",reason=\"{reason}\"}} 0");
        assert!(text.contains(&line), "{line} not in\n{text}");
    }
    for link in &links {
        link.close(T);
    }
}
