//! `stint serve`: profiles over HTTP, for Prometheus and for people (DESIGN D20). A small
//! blocking server (tiny_http) answers one request at a time, GET only:
//!
//! - `/metrics`: every profile of the source read afresh ([`openmetrics::Scraper`]) and
//!   rendered as OpenMetrics text ([`openmetrics::render`]), or as the Prometheus text
//!   format 0.0.4 when the `Accept` header asks for `text/plain` only;
//! - `/profile/<pid>.json`: the `stint-profile/1` document of one process;
//! - `/profile/<pid>.pprof`: the gzipped pprof profile of one process (`stint export
//!   --format pprof`), for `go tool pprof` or Pyroscope;
//! - `/`: a short index.
//!
//! A response is built whole before it is sent, so a client never gets part of one. Files
//! that are no profiles are logged once on stderr (`stint serve: path: problem; skipped`)
//! and counted in every exposition. It listens on 127.0.0.1 unless told otherwise, reads
//! only the user's own live profiles unless given a glob, and nothing over HTTP writes
//! anything. SIGINT and SIGTERM end the loop (checked every 200 ms) and it exits 0.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use signal_hook::consts::{SIGINT, SIGTERM};
use stint_profile::json::profile_json;
use stint_profile::openmetrics::{self, Options, Scraper, Source, TextFormat};
use tiny_http::{Header, Method, Request, Response, Server};

use crate::args::ServeArgs;
use crate::export::pprof;

pub fn run(a: ServeArgs) -> anyhow::Result<()> {
    let source = match &a.profiles {
        Some(glob) => Source::glob(glob),
        None => Source::Live,
    };
    if let Source::Glob { dir, .. } = &source {
        if !dir.is_dir() {
            anyhow::bail!("{}: no such directory (--profiles {})", dir.display(), a.profiles.as_deref().unwrap_or(""));
        }
    }
    let server = Server::http(a.listen).map_err(|e| anyhow!("{}: cannot listen: {e}", a.listen))?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [SIGINT, SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    let what = match &a.profiles {
        Some(g) => g.clone(),
        None => "the live profiles of this user".into(),
    };
    eprintln!("stint serve: listening on http://{} ({what})", server.server_addr());
    let mut state = Serve { scraper: Scraper::new(source), top: a.top };
    while !stop.load(Ordering::Relaxed) {
        match server.recv_timeout(Duration::from_millis(200)) {
            Ok(Some(req)) => state.answer(req),
            Ok(None) => {}
            // Interrupted by a signal: the flag says whether to stop.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(anyhow!("{}: {e}", a.listen)),
        }
    }
    eprintln!("stint serve: stopped");
    Ok(())
}

struct Serve {
    scraper: Scraper,
    top: usize,
}

/// A whole response: status, content type, body.
struct Answer {
    status: u16,
    content_type: &'static str,
    body: Vec<u8>,
}

impl Answer {
    fn text(status: u16, body: impl Into<String>) -> Answer {
        Answer { status, content_type: "text/plain; charset=utf-8", body: body.into().into_bytes() }
    }
}

impl Serve {
    fn answer(&mut self, req: Request) {
        let accept = req.headers().iter().find(|h| h.field.equiv("Accept")).map(|h| h.value.as_str().to_owned());
        let a = match req.method() {
            Method::Get | Method::Head => self.route(req.url(), accept.as_deref()),
            _ => Answer::text(405, "only GET is served\n"),
        };
        let mut resp = Response::from_data(a.body).with_status_code(a.status);
        if let Ok(h) = Header::from_bytes(&b"Content-Type"[..], a.content_type.as_bytes()) {
            resp.add_header(h);
        }
        if a.status == 405 {
            if let Ok(h) = Header::from_bytes(&b"Allow"[..], &b"GET, HEAD"[..]) {
                resp.add_header(h);
            }
        }
        // A client that went away is no error of ours.
        let _ = req.respond(resp);
    }

    fn route(&mut self, url: &str, accept: Option<&str>) -> Answer {
        let path = url.split(['?', '#']).next().unwrap_or("");
        if path == "/metrics" {
            return self.metrics(accept);
        }
        if path == "/" {
            return self.index();
        }
        if let Some(rest) = path.strip_prefix("/profile/") {
            if let Some(pid) = rest.strip_suffix(".json").and_then(|p| p.parse::<u32>().ok()) {
                return match self.scraper.find(pid) {
                    Some(p) => match serde_json::to_string_pretty(&profile_json(&p)) {
                        Ok(mut s) => {
                            s.push('\n');
                            Answer { status: 200, content_type: "application/json", body: s.into_bytes() }
                        }
                        Err(e) => Answer::text(500, format!("pid {pid}: cannot encode the profile: {e}\n")),
                    },
                    None => Answer::text(404, format!("pid {pid}: no profile of that process is served here\n")),
                };
            }
            if let Some(pid) = rest.strip_suffix(".pprof").and_then(|p| p.parse::<u32>().ok()) {
                let Some(p) = self.scraper.find(pid) else {
                    return Answer::text(404, format!("pid {pid}: no profile of that process is served here\n"));
                };
                return match pprof::render(std::slice::from_ref(&p), &indicatif::ProgressBar::hidden()) {
                    Ok(body) => Answer { status: 200, content_type: "application/octet-stream", body },
                    Err(e) => Answer::text(500, format!("pid {pid}: cannot encode the profile as pprof: {e}\n")),
                };
            }
        }
        Answer::text(404, format!("{path}: not found; see / for what is served\n"))
    }

    fn metrics(&mut self, accept: Option<&str>) -> Answer {
        let scrape = self.scraper.scrape();
        for line in &scrape.skipped {
            eprintln!("stint serve: {line}");
        }
        let format = TextFormat::negotiate(accept);
        let opts = Options { top: self.top, format, scrape: Some(scrape.stats) };
        let body = openmetrics::render(&scrape.profiles, &opts).into_bytes();
        Answer { status: 200, content_type: format.content_type(), body }
    }

    fn index(&self) -> Answer {
        let mut body = String::from(
            "stint serve\n\n/metrics               OpenMetrics text of every profile served\n\
             /profile/<pid>.json    the stint-profile/1 JSON of one process\n             /profile/<pid>.pprof   its gzipped pprof profile (go tool pprof)\n\nlive profiles at the last scrape:\n",
        );
        if self.scraper.live_files().is_empty() {
            body.push_str("  (none yet; /metrics reads them)\n");
        }
        for f in self.scraper.live_files() {
            body.push_str(&format!("  {}\n", f.display()));
        }
        Answer::text(200, body)
    }
}
