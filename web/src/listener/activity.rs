//! What a connection is doing, as its timeouts see it: waiting idle for a request, receiving a
//! request's headers since some instant, or handling requests (no connection timeout runs then).

use std::{
    pin::Pin,
    sync::{Arc, Mutex, PoisonError},
    task::{Context, Poll},
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
    sync::Notify,
    time::Instant,
};

use super::ListenerLimits;

/// A connection's activity, shared by its socket (bytes arriving), its service (requests starting and
/// ending) and its watch (deadlines).
#[derive(Debug)]
pub(super) struct Activity {
    state: Mutex<State>,
    changed: Notify,
}

#[derive(Debug)]
struct State {
    /// Requests whose response has not been sent in full.
    in_flight: usize,
    /// When the connection last had nothing to do.
    idle_since: Instant,
    /// When the first byte of the next request's headers arrived.
    head_since: Option<Instant>,
}

impl Activity {
    pub(super) fn new() -> Self {
        Self {
            state: Mutex::new(State {
                in_flight: 0,
                idle_since: Instant::now(),
                head_since: None,
            }),
            changed: Notify::new(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Bytes came in: between requests, they start the next request's headers.
    fn bytes_arrived(&self) {
        let mut state = self.state();
        if state.in_flight == 0 && state.head_since.is_none() {
            state.head_since = Some(Instant::now());
            drop(state);
            self.changed.notify_one();
        }
    }

    /// A request's headers are in; it is in flight until the returned guard drops.
    pub(super) fn request_started(self: &Arc<Self>) -> InFlight {
        let mut state = self.state();
        state.in_flight += 1;
        state.head_since = None;
        drop(state);
        self.changed.notify_one();
        InFlight(self.clone())
    }

    fn request_finished(&self) {
        let mut state = self.state();
        state.in_flight = state.in_flight.saturating_sub(1);
        if state.in_flight == 0 {
            state.idle_since = Instant::now();
        }
        drop(state);
        self.changed.notify_one();
    }

    /// Resolves when the activity changed since the last call.
    pub(super) async fn changed(&self) {
        self.changed.notified().await;
    }

    /// When the connection must close unless something happens first, and what it waits for then;
    /// `None` while a request is in flight.
    fn due(&self, limits: &ListenerLimits) -> Option<(Instant, Waiting)> {
        let state = self.state();
        if state.in_flight > 0 {
            return None;
        }
        Some(match state.head_since {
            Some(since) => (since + limits.header_timeout, Waiting::Headers),
            None => (state.idle_since + limits.idle_timeout, Waiting::Idle),
        })
    }

    /// See [`Activity::due`].
    pub(super) fn deadline(&self, limits: &ListenerLimits) -> Option<Instant> {
        self.due(limits).map(|(at, _)| at)
    }

    /// What the connection waited for past its deadline, if it did.
    pub(super) fn expired(&self, limits: &ListenerLimits) -> Option<Waiting> {
        self.due(limits)
            .filter(|&(at, _)| at <= Instant::now())
            .map(|(_, waiting)| waiting)
    }
}

/// What a connection waits for from its client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Waiting {
    /// The rest of a request's headers.
    Headers,
    /// The next request on a kept-alive connection.
    Idle,
}

/// A request in flight on its connection, until dropped with the response body.
#[derive(Debug)]
pub(super) struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.request_finished();
    }
}

/// A socket that tells its connection's [`Activity`] when bytes arrive.
#[derive(Debug)]
pub(super) struct Watched {
    stream: TcpStream,
    activity: Arc<Activity>,
}

impl Watched {
    pub(super) fn new(stream: TcpStream, activity: Arc<Activity>) -> Self {
        Self { stream, activity }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.activity.bytes_arrived();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Limits where only `waiting`'s timeout has run out.
    fn past(waiting: &str) -> ListenerLimits {
        let hour = Duration::from_secs(3600);
        ListenerLimits {
            header_timeout: if waiting == "headers" {
                Duration::ZERO
            } else {
                hour
            },
            idle_timeout: if waiting == "idle" {
                Duration::ZERO
            } else {
                hour
            },
            ..ListenerLimits::default()
        }
    }

    #[test]
    fn idle_headers_and_in_flight_each_have_their_deadline() {
        let activity = Arc::new(Activity::new());
        assert_eq!(activity.expired(&past("idle")), Some(Waiting::Idle));
        assert_eq!(activity.expired(&past("headers")), None);
        activity.bytes_arrived();
        assert_eq!(activity.expired(&past("headers")), Some(Waiting::Headers));
        assert_eq!(activity.expired(&past("idle")), None);
        let in_flight = activity.request_started();
        assert_eq!(activity.deadline(&past("idle")), None);
        assert_eq!(activity.deadline(&past("headers")), None);
        // Bytes of a request in flight (its body) start no headers.
        activity.bytes_arrived();
        drop(in_flight);
        assert_eq!(activity.expired(&past("headers")), None);
        assert_eq!(activity.expired(&past("idle")), Some(Waiting::Idle));
    }
}
