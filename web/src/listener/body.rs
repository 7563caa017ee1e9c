//! Body wrappers: a request body that must arrive by a deadline, and a response body that keeps its
//! request counted as in flight until it is sent in full or dropped.

use std::{
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use axum::{BoxError, body::Bytes};
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::time::Sleep;

use super::activity::InFlight;

/// The error of a request body that did not arrive in full within the listener's body timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the request body did not arrive within {} ms", .0.as_millis())]
pub struct BodyTimeout(pub Duration);

impl BodyTimeout {
    /// The body timeout somewhere in `error`'s chain of sources.
    pub fn find(error: &(dyn std::error::Error + 'static)) -> Option<Self> {
        std::iter::successors(Some(error), |e| e.source()).find_map(|e| e.downcast_ref().copied())
    }
}

/// A request body that fails with [`BodyTimeout`] when it is not in by its deadline.
pub(super) struct DeadlineBody {
    body: Incoming,
    deadline: Pin<Box<Sleep>>,
    timeout: Duration,
}

impl DeadlineBody {
    /// `body`, due within `timeout` from now.
    pub(super) fn new(body: Incoming, timeout: Duration) -> Self {
        Self {
            body,
            deadline: Box::pin(tokio::time::sleep(timeout)),
            timeout,
        }
    }
}

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(BoxError::from)));
        }
        match this.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimeout(this.timeout))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A response body that holds its request [`InFlight`] until it is sent in full or dropped.
pub(super) struct InFlightBody {
    body: axum::body::Body,
    _in_flight: InFlight,
}

impl InFlightBody {
    pub(super) fn new(body: axum::body::Body, in_flight: InFlight) -> Self {
        Self {
            body,
            _in_flight: in_flight,
        }
    }
}

impl HttpBody for InFlightBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_timeout_is_found_under_wrappers() {
        let timeout = BodyTimeout(Duration::from_millis(1500));
        let wrapped = axum::Error::new(timeout);
        assert_eq!(BodyTimeout::find(&wrapped), Some(timeout));
        let other = axum::Error::new(std::io::Error::other("reset"));
        assert_eq!(BodyTimeout::find(&other), None);
        assert!(timeout.to_string().contains("1500 ms"), "{timeout}");
    }
}
