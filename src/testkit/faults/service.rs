//! The tower layer and service that put a [`Faults`] in a client's stack, and the
//! response bodies that fail once the operator has crashed.

use super::*;

/// The [`Layer`] of a [`Faults`] (see [`Faults::layer`]).
#[derive(Clone, Debug)]
pub struct FaultLayer {
    pub(super) faults: Faults,
}

impl<S> Layer<S> for FaultLayer {
    type Service = FaultService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        FaultService {
            inner,
            faults: self.faults.clone(),
        }
    }
}

/// The service a [`FaultLayer`] wraps around a client's stack.
#[derive(Debug)]
pub struct FaultService<S> {
    inner: S,
    faults: Faults,
}

pub(super) type Answer = Result<Response<Box<DynBody>>, BoxError>;

/// The JSON body of a request that carries one (kube's are buffered, so this never waits).
pub(super) fn peek_json(body: &Body) -> Option<Value> {
    let copy = body.try_clone()?;
    let collected = copy.collect().now_or_never()?.ok()?;
    serde_json::from_slice(&collected.to_bytes()).ok()
}

/// A Kubernetes `Status` answer with `code`, as the API server would send it.
pub(super) fn status_answer(code: u16, request: &RequestInfo) -> Answer {
    let reason = match code {
        409 => "Conflict",
        404 => "NotFound",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    };
    let body = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("injected by lockstep::testkit: {code} for {request}"),
        "reason": reason,
        "code": code,
    });
    let body: Box<DynBody> = Box::new(
        Full::new(Bytes::from(body.to_string())).map_err(|never| -> BoxError { match never {} }),
    );
    let response = Response::builder()
        .status(code)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body)?;
    Ok(response)
}

impl<S> Service<Request<Body>> for FaultService<S>
where
    S: Service<Request<Body>, Response = Response<Box<DynBody>>, Error = BoxError>,
    S::Future: Send + 'static,
{
    type Response = Response<Box<DynBody>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Answer> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        if self.faults.has_crashed() {
            // `call` will not use the inner service.
            return Poll::Ready(Ok(()));
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let uri = request.uri();
        let info = RequestInfo::parse(request.method(), uri.path(), uri.query().unwrap_or(""));
        let body = info
            .is_mutating()
            .then(|| peek_json(request.body()))
            .flatten();
        match self.faults.admit(info.clone(), body.as_ref()) {
            Admission::Block => {
                let error = self.faults.blocked_error();
                Box::pin(std::future::ready(Err(error.into())))
            }
            Admission::Refuse { code } => Box::pin(std::future::ready(status_answer(code, &info))),
            Admission::Send { index, mutating } => {
                let faults = self.faults.clone();
                let sent = self.inner.call(request);
                Box::pin(async move {
                    match sent.await {
                        Ok(response) => {
                            let code = response.status().as_u16();
                            if !faults.answered(index, mutating, code) {
                                return Err(faults.blocked_error().into());
                            }
                            let (parts, body) = response.into_parts();
                            let body: Box<DynBody> = if info.is_watch() && parts.status.is_success()
                            {
                                Box::new(WatchBody::new(body, faults, info))
                            } else {
                                Box::new(GuardedBody {
                                    inner: body,
                                    crashed: Box::pin(faults.crashed()),
                                    faults,
                                })
                            };
                            Ok(Response::from_parts(parts, body))
                        }
                        Err(error) => {
                            faults.failed(index, mutating, error.to_string());
                            Err(error)
                        }
                    }
                })
            }
        }
    }
}

/// A response body that fails at its next read once the crash fired.
pub(super) struct GuardedBody {
    pub(super) inner: Box<DynBody>,
    pub(super) crashed: Pin<Box<WaitForCancellationFutureOwned>>,
    pub(super) faults: Faults,
}

impl http_body::Body for GuardedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.crashed.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(self.faults.blocked_error().into())));
        }
        Pin::new(&mut self.inner).poll_frame(cx)
    }
}

pub(super) type LineEdit = Box<dyn FnMut(Vec<u8>) -> Vec<Vec<u8>> + Send>;

/// A watch response body, edited line by line (dropped events, stale replays), that
/// fails at its next read once the crash fired.
pub(super) struct WatchBody {
    pub(super) inner: Box<DynBody>,
    pub(super) crashed: Pin<Box<WaitForCancellationFutureOwned>>,
    pub(super) faults: Faults,
    pub(super) request: RequestInfo,
    pub(super) filter: LineFilter<LineEdit>,
    /// Replays to heal, as the line edit schedules them.
    pub(super) scheduled: Arc<Mutex<Vec<(Duration, ObjectKey)>>>,
    pub(super) heals: Vec<(Pin<Box<tokio::time::Sleep>>, ObjectKey)>,
    pub(super) out: VecDeque<Bytes>,
    pub(super) ended: bool,
}

impl WatchBody {
    pub(super) fn new(inner: Box<DynBody>, faults: Faults, request: RequestInfo) -> Self {
        let scheduled: Arc<Mutex<Vec<(Duration, ObjectKey)>>> = Arc::default();
        let edit: LineEdit = {
            let (faults, request, scheduled) = (faults.clone(), request.clone(), scheduled.clone());
            Box::new(move |line| {
                let mut heals = Vec::new();
                let out = faults.lock().edit_watch_line(&request, line, &mut heals);
                if !heals.is_empty() {
                    scheduled
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .extend(heals);
                }
                out
            })
        };
        Self {
            inner,
            crashed: Box::pin(faults.crashed()),
            faults,
            request,
            filter: LineFilter::new(edit),
            scheduled,
            heals: Vec::new(),
            out: VecDeque::new(),
            ended: false,
        }
    }
}

impl http_body::Body for WatchBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if this.crashed.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(this.faults.blocked_error().into())));
        }
        loop {
            if let Some(bytes) = this.out.pop_front() {
                return Poll::Ready(Some(Ok(Frame::data(bytes))));
            }
            if this.ended {
                return Poll::Ready(None);
            }
            let scheduled = std::mem::take(
                &mut *this
                    .scheduled
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner),
            );
            for (hold, key) in scheduled {
                this.heals.push((Box::pin(tokio::time::sleep(hold)), key));
            }
            let mut due = Vec::new();
            this.heals.retain_mut(|(sleep, key)| {
                if sleep.as_mut().poll(cx).is_ready() {
                    due.push(key.clone());
                    false
                } else {
                    true
                }
            });
            for key in due {
                if let Some(line) = this.faults.lock().heal(&this.request, &key) {
                    this.out.push_back(Bytes::from(line));
                }
            }
            if !this.out.is_empty() {
                continue;
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => this.out.extend(this.filter.push(&data)),
                    Err(other) => return Poll::Ready(Some(Ok(other))),
                },
                Poll::Ready(Some(Err(error))) => return Poll::Ready(Some(Err(error))),
                Poll::Ready(None) => {
                    this.out.extend(this.filter.finish());
                    this.ended = true;
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}
