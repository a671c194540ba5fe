//! Held requests: a request that cannot be answered yet (a long-poll whose page is empty)
//! is held for its view until a deadline, and asked again each time the view changes.
//!
//! The face says so with [`Holds::hold`]: the registration of its view's wake-ups (a
//! [`Watch`], taken before the request's first read, so that nothing committed after that
//! read is missed), the deadline, and what to ask again ([`AskAgain`]). It gets a response
//! that stands for the answer to come and carries the [`Hold`]: the layers around the
//! face (gate, CORS, timeout) run over that stand-in and are done with, and the connection
//! then keeps only the hold until it gives the real answer, to which the headers the layers
//! added to the stand-in are carried ([`answer`]).
//!
//! Why not wait inside the handler: a request waiting there keeps every layer's future and
//! the router's around it for as long as it is held, several times what the wait itself
//! needs; ten thousand held long-polls kept that much each.
//!
//! **The rule for layers.** A layer that reads or changes answers (logs, metrics,
//! compression) is made with [`on_answer`] (or calls [`observe`]), which gives it each
//! request's real answer: at once, or a held request's when it is given, with the status it
//! ends with (200, 304, 503). Any other layer sees a held request's stand-in: a 202 without
//! a body, which [`Hold::of`] recognises.

use super::places::{HeldPlaces, Place};
use super::wakeups::{Prefetch, Wakeups, Watch};
use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Request, StatusCode, header};
use axum::response::Response;
use feed::View;
use futures::future::BoxFuture;
use http_body_util::Either;
use metrics::{HeldCount, Metrics};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// How long past its deadline a held request's last question may take before it is given
/// up as stuck (503), as the timeout layer does for other requests.
const STUCK: Duration = Duration::from_secs(30);

/// What a held request asks again.
pub trait AskAgain: Send + 'static {
    /// After wake-up `generation` of the view: the answer, or `None` to go on holding.
    fn ask(&mut self, generation: u64) -> BoxFuture<'_, Option<Response>>;
    /// The answer when the deadline passes or the service stops.
    fn last(self: Box<Self>) -> Response;
}

/// Something that reads or changes a request's answer once it is given.
pub trait Observe: Send + 'static {
    fn answered(self, answer: &mut Response);
}

impl<F: FnOnce(&mut Response) + Send + 'static> Observe for F {
    fn answered(self, answer: &mut Response) {
        self(answer)
    }
}

/// The serving side of held requests: the wake-up registry, the places (`[http]
/// max_held`), the closing signal and the metrics.
#[derive(Clone)]
pub struct Holds {
    wakeups: Arc<Wakeups>,
    places: Arc<HeldPlaces>,
    closing: watch::Receiver<bool>,
    longpolls: HeldCount,
}

/// All the places for held requests are taken.
#[derive(Debug)]
pub struct Full;

impl Holds {
    pub fn new(
        wakeups: Arc<Wakeups>,
        places: Arc<HeldPlaces>,
        closing: watch::Receiver<bool>,
        metrics: Arc<Metrics>,
    ) -> Holds {
        Holds { wakeups, places, closing, longpolls: metrics.held_count("longpoll") }
    }

    /// Registers for `view`'s wake-ups: before the first read of a request that may be held,
    /// with the read it makes when woken, if it is one the registry can make for it first.
    pub fn watch(&self, view: View, prefetch: Option<Arc<dyn Prefetch>>) -> Watch {
        self.wakeups.watch(view, prefetch)
    }

    /// A place for a request held by the face itself (an event stream), if one is free.
    pub fn place(&self) -> Result<Place, Full> {
        self.places.take().ok_or(Full)
    }

    /// Whether the service is stopping: held requests answer, streams end.
    pub fn is_closing(&self) -> bool {
        *self.closing.borrow()
    }

    /// Wakes every watch when the service begins to stop, so that held requests see it (a
    /// wait on the signal in each would cost every held request its room).
    pub async fn wake_all_when_closing(mut self) {
        let _ = self.closing.wait_for(|c| *c).await;
        self.wakeups.wake_feed(None);
    }

    /// Holds a request for the view `watch` registered until `deadline`, asking `ask` again
    /// after each wake-up: the stand-in response that carries the hold. `Full` when every
    /// place is taken (the caller refuses the request: README "Bounds").
    pub fn hold(&self, watch: Watch, deadline: Instant, ask: impl AskAgain) -> Result<Response, Full> {
        let place = self.place()?;
        let wait = run(self.clone(), watch, place, deadline, Box::new(ask));
        let mut res = Response::new(Body::empty());
        *res.status_mut() = StatusCode::ACCEPTED;
        res.extensions_mut().insert(Hold::new(wait));
        Ok(res)
    }
}

/// Waits for a change of the view or the deadline, asks again after each change, and gives
/// the answer. What it keeps while it waits is all a held request costs.
#[expect(clippy::manual_async_fn, reason = "an async fn keeps its arguments twice")]
fn run(
    holds: Holds,
    mut watch: Watch,
    place: Place,
    deadline: Instant,
    mut ask: Box<dyn AskAgain>,
) -> impl Future<Output = Response> + Send {
    // A block, not an `async fn`: its captures are kept once.
    async move {
        let _held = (holds.longpolls.one_more(), place);
        let mut until = std::pin::pin!(tokio::time::sleep_until(deadline));
        // A stop wakes every watch (see `crate::serve`); one registered after sees it here.
        while !holds.is_closing() {
            let generation = tokio::select! {
                // A change first: a request woken as its deadline passes answers what changed.
                biased;
                generation = watch.changed() => generation,
                () = &mut until => break,
            };
            if holds.is_closing() {
                break;
            }
            // Bounded as the timeout layer bounds a request: only a stuck read runs into it.
            match within(deadline + STUCK, ask.ask(generation)).await {
                Ok(Some(answer)) => return answer,
                Ok(None) => {}
                Err(_) => {
                    return Response::builder()
                        .status(StatusCode::SERVICE_UNAVAILABLE)
                        .body(Body::empty())
                        .unwrap_or_default();
                }
            }
        }
        ask.last()
    }
}

/// `fut`'s output, or `Elapsed` if `deadline` passes first; no timer is made when `fut` is
/// ready when first polled (a woken long-poll mostly is: its read was made before it was
/// woken), since a timer made and dropped costs a timer wheel's lock twice.
pub async fn within<F: Future>(deadline: Instant, fut: F) -> Result<F::Output, tokio::time::error::Elapsed> {
    let mut fut = std::pin::pin!(fut);
    if let Poll::Ready(out) = futures::poll!(fut.as_mut()) {
        return Ok(out);
    }
    tokio::time::timeout_at(deadline, fut).await
}

/// A held request's answer to come, in its stand-in's extensions (which must be `Clone +
/// Sync`).
#[derive(Clone)]
pub struct Hold(Arc<Mutex<Option<Answered>>>);

/// The answer of a held request, and who sees it when it is given.
pub struct Answered {
    wait: BoxFuture<'static, Response>,
    observers: Vec<Observer>,
}

/// An observer, boxed.
type Observer = Box<dyn FnOnce(&mut Response) + Send>;

impl Future for Answered {
    type Output = Response;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Response> {
        let mut res = ready!(self.wait.as_mut().poll(cx));
        for observer in std::mem::take(&mut self.observers) {
            observer(&mut res);
        }
        Poll::Ready(res)
    }
}

impl Hold {
    fn new(wait: impl Future<Output = Response> + Send + 'static) -> Hold {
        Hold(Arc::new(Mutex::new(Some(Answered { wait: Box::pin(wait), observers: Vec::new() }))))
    }

    /// The hold `res` stands in for, if it is a stand-in.
    pub fn of<B>(res: &axum::http::Response<B>) -> Option<&Hold> {
        res.extensions().get::<Hold>()
    }

    /// Has `observer` see (and change) the answer when it is given, after those before it.
    fn then(&self, observer: impl Observe) {
        if let Some(answered) = self.0.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
            answered.observers.push(Box::new(move |res: &mut Response| observer.answered(res)));
        }
    }
}

/// Has `observer` see `res`'s real answer: `res` itself, now, or the answer of the request
/// it stands in for, when it is given.
pub fn observe(res: &mut Response, observer: impl Observe) {
    match Hold::of(res) {
        Some(hold) => hold.then(observer),
        None => observer.answered(res),
    }
}

/// The headers the layers put on a stand-in, but its `Content-Length` (of its empty
/// body, not the answer's): a short list, kept while the wait goes on.
pub struct Added(pub(super) Vec<(HeaderName, HeaderValue)>);

/// What the layers added to a stand-in, and its wait; any other response as it is.
pub fn split<B>(mut res: axum::http::Response<B>) -> Result<(Added, Answered), axum::http::Response<B>> {
    let wait = match res.extensions_mut().remove::<Hold>() {
        Some(Hold(wait)) => wait.lock().unwrap_or_else(PoisonError::into_inner).take(),
        None => None,
    };
    let Some(wait) = wait else { return Err(res) };
    let added = res.headers().iter().filter(|(n, _)| *n != header::CONTENT_LENGTH);
    Ok((Added(added.map(|(n, v)| (n.clone(), v.clone())).collect()), wait))
}

/// Puts `added` on `answer` as a layer puts its headers on the way out (as CORS does):
/// replacing the answer's own, but for `Vary`, whose values are added.
pub fn settle<'a>(added: impl IntoIterator<Item = &'a (HeaderName, HeaderValue)> + Clone, answer: &mut Response) {
    for (name, _) in added.clone() {
        if name != header::VARY {
            answer.headers_mut().remove(name);
        }
    }
    for (name, value) in added {
        answer.headers_mut().append(name.clone(), value.clone());
    }
}

/// The answer `res` stands for, waited for here when it is a stand-in.
pub async fn answer<B>(res: axum::http::Response<B>) -> axum::http::Response<Either<B, Body>> {
    match split(res) {
        Ok((added, wait)) => {
            let mut answer = wait.await;
            settle(&added.0, &mut answer);
            answer.map(Either::Right)
        }
        Err(res) => res.map(Either::Left),
    }
}

/// A layer that gives each request's real answer to the observer `make` makes from the
/// request (see the rule in the module docs).
pub fn on_answer<M>(make: M) -> OnAnswer<M> {
    OnAnswer(make)
}

/// See [`on_answer`].
#[derive(Clone, Copy)]
pub struct OnAnswer<M>(M);

impl<S, M: Clone> tower::Layer<S> for OnAnswer<M> {
    type Service = Observed<S, M>;
    fn layer(&self, inner: S) -> Observed<S, M> {
        Observed { inner, make: self.0.clone() }
    }
}

/// A service whose answers are observed; see [`on_answer`].
#[derive(Clone)]
pub struct Observed<S, M> {
    inner: S,
    make: M,
}

impl<S, M, O, B> tower::Service<Request<B>> for Observed<S, M>
where
    S: tower::Service<Request<B>, Response = Response>,
    M: Fn(&Request<B>) -> O,
    O: Observe,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Observing<S::Future, O>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let observer = (self.make)(&req);
        Observing { inner: self.inner.call(req), observer: Some(observer) }
    }
}

pin_project_lite::pin_project! {
    /// An observed service's answer; see [`on_answer`].
    pub struct Observing<F, O> {
        #[pin]
        inner: F,
        observer: Option<O>,
    }
}

impl<F, O, E> Future for Observing<F, O>
where
    F: Future<Output = Result<Response, E>>,
    O: Observe,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let me = self.project();
        let mut res = ready!(me.inner.poll(cx))?;
        if let Some(observer) = me.observer.take() {
            observe(&mut res, observer);
        }
        Poll::Ready(Ok(res))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use feed::{NodeName, Order};
    use tower::{Layer, Service, ServiceExt};

    struct Asked(Vec<StatusCode>);

    impl AskAgain for Asked {
        fn ask(&mut self, _generation: u64) -> BoxFuture<'_, Option<Response>> {
            let status = self.0.pop();
            Box::pin(async move { status.map(|s| Response::builder().status(s).body(Body::empty()).unwrap()) })
        }
        fn last(self: Box<Self>) -> Response {
            Response::builder().status(StatusCode::NOT_MODIFIED).body(Body::empty()).unwrap()
        }
    }

    /// Holds with `places` places, the registry they watch, and the closing signal's sender
    /// (kept by the test: dropped, it would read as closing never comes).
    fn holds(places: usize) -> (Holds, Arc<Wakeups>, watch::Sender<bool>) {
        let wakeups = Wakeups::new();
        let (closing_tx, closing) = watch::channel(false);
        (Holds::new(wakeups.clone(), HeldPlaces::new(places), closing, Arc::new(Metrics::new())), wakeups, closing_tx)
    }

    fn view() -> View {
        NodeName::parse("f").unwrap().resolve(Order::NEWEST_FIRST)
    }

    /// A face that holds every request, answering `asked` after wake-ups, behind a layer
    /// made with `on_answer` that records each answer's status.
    async fn held_through_a_layer(asked: Vec<StatusCode>, wake: bool, deadline: Duration) -> (Vec<StatusCode>, u16) {
        let (holds, wakeups, _closing) = holds(1);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let layer = on_answer(move |_: &Request<Body>| {
            let record = record.clone();
            move |res: &mut Response| record.lock().unwrap().push(res.status())
        });
        let face = tower::service_fn(move |_: Request<Body>| {
            let w = holds.watch(view(), None);
            let res = holds.hold(w, Instant::now() + deadline, Asked(asked.clone())).unwrap();
            async move { Ok::<_, std::convert::Infallible>(res) }
        });
        let mut svc = layer.layer(face);
        let stand_in = svc.ready().await.unwrap().call(Request::new(Body::empty())).await.unwrap();
        assert_eq!(stand_in.status(), StatusCode::ACCEPTED, "a stand-in");
        assert!(Hold::of(&stand_in).is_some());
        assert!(seen.lock().unwrap().is_empty(), "not observed before its answer");
        if wake {
            wakeups.wake_feed(Some("f"));
        }
        let status = answer(stand_in).await.status().as_u16();
        let seen = seen.lock().unwrap().clone();
        (seen, status)
    }

    #[tokio::test]
    async fn a_layer_made_with_on_answer_sees_each_held_answer_with_its_real_status() {
        // Woken, asked again: answered 200.
        assert_eq!(
            held_through_a_layer(vec![StatusCode::OK], true, Duration::from_secs(5)).await,
            (vec![StatusCode::OK], 200)
        );
        // The deadline passes: the last answer, a 304.
        assert_eq!(
            held_through_a_layer(vec![], false, Duration::from_millis(20)).await,
            (vec![StatusCode::NOT_MODIFIED], 304)
        );
    }

    #[tokio::test]
    async fn a_hold_needs_a_place() {
        let (holds, _, _closing) = holds(1);
        let far = Instant::now() + Duration::from_secs(60);
        let first = holds.hold(holds.watch(view(), None), far, Asked(vec![])).unwrap();
        assert!(holds.hold(holds.watch(view(), None), far, Asked(vec![])).is_err(), "one place");
        drop(first);
        assert!(holds.hold(holds.watch(view(), None), far, Asked(vec![])).is_ok(), "given back with the hold");
    }

    #[tokio::test]
    async fn the_answer_comes_with_the_headers_the_layers_put_on_its_stand_in() {
        let (holds, _, _closing) = holds(1);
        let mut stand_in = holds.hold(holds.watch(view(), None), Instant::now(), Asked(vec![])).unwrap();
        // What CORS adds on the way out; the last answer has its own Vary.
        let h = stand_in.headers_mut();
        h.append(header::VARY, HeaderValue::from_static("origin"));
        h.append(header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
        let seen = Arc::new(Mutex::new(None));
        let record = seen.clone();
        observe(&mut stand_in, move |r: &mut Response| {
            r.headers_mut().insert(header::VARY, HeaderValue::from_static("Accept"));
            *record.lock().unwrap() = Some(r.status());
        });
        let res = answer(stand_in).await;
        assert_eq!(res.status(), StatusCode::NOT_MODIFIED);
        let vary: Vec<_> = res.headers().get_all(header::VARY).iter().collect();
        assert_eq!(vary, ["Accept", "origin"]);
        assert_eq!(res.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN], "*");
        assert!(!res.headers().contains_key(header::CONTENT_LENGTH), "the stand-in's length is not the answer's");
        assert_eq!(*seen.lock().unwrap(), Some(StatusCode::NOT_MODIFIED));
    }

    #[tokio::test]
    async fn any_other_response_is_the_answer_itself() {
        let res = answer(Response::new(Body::from("now"))).await;
        let body = http_body_util::BodyExt::collect(res.into_body()).await.unwrap().to_bytes();
        assert_eq!(&body[..], b"now");
    }
}
