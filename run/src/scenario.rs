//! A checked scenario of either kind, and running it to its [`Report`].

use kvplan_planner::scenario::Scenario as SimulateScenario;
use kvplan_serve::scenario::ServeScenario;
use kvplan_vocab::{Progress, RunKind};
use kvplan_workloads::{Request, RequestStream};

use crate::error::ScenarioError;
use crate::report::Report;

/// A checked scenario of either kind, ready to run.
#[derive(Debug, Clone)]
pub enum Scenario {
    /// Op-level: a plan on the discrete-event simulator.
    Simulate(Box<SimulateScenario>),
    /// Serving: requests through the serving simulator.
    Serve(Box<ServeScenario>),
}

impl Scenario {
    /// Which kind it is.
    pub fn kind(&self) -> RunKind {
        match self {
            Scenario::Simulate(_) => RunKind::Simulate,
            Scenario::Serve(_) => RunKind::Serve,
        }
    }

    /// The scenario with its work drawn (a serving scenario's requests generated or replayed),
    /// so a front end can size a progress display before [`Prepared::run`]. `requests` replaces
    /// a serving scenario's own workload (a measured run replayed); an op-level scenario has
    /// none and ignores it.
    ///
    /// A generated workload is drawn while it is served (its requests are not held: memory
    /// follows the requests in flight); a trace, a conversation workload or `requests` are held.
    pub fn prepare(&self, requests: Option<Vec<Request>>) -> Result<Prepared<'_>, ScenarioError> {
        let requests = match (self, requests) {
            (Scenario::Serve(sc), None) => sc.request_stream().map_err(ScenarioError::workload)?,
            (_, given) => RequestStream::held(given.unwrap_or_default()),
        };
        Ok(Prepared {
            scenario: self,
            requests,
        })
    }
}

/// A scenario with its requests ready to draw ([`Scenario::prepare`]).
pub struct Prepared<'a> {
    scenario: &'a Scenario,
    requests: RequestStream,
}

impl std::fmt::Debug for Prepared<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("scenario", self.scenario)
            .field("requests", &self.requests.len())
            .finish()
    }
}

impl Prepared<'_> {
    /// The requests a serving run will serve (0 for an op-level run).
    pub fn requests(&self) -> usize {
        self.requests.len() as usize
    }

    /// Runs it: the planner's plan on the discrete-event simulator, or the serving simulator.
    pub fn run(self) -> Result<Report, ScenarioError> {
        self.run_with(&kvplan_vocab::Silent)
    }

    /// [`run`](Self::run), telling `progress` how far a serving run has come (requests
    /// served).
    pub fn run_with(self, progress: &dyn Progress) -> Result<Report, ScenarioError> {
        match self.scenario {
            Scenario::Simulate(sc) => Ok(Report::Simulate(Box::new(
                kvplan_planner::run::simulate_scenario(sc)?,
            ))),
            Scenario::Serve(sc) => Ok(Report::Serve(Box::new(
                sc.run_stream(self.requests, progress)
                    .map_err(ScenarioError::serve)?,
            ))),
        }
    }
}

/// Runs `scenario` to its report: [`Scenario::prepare`] then [`Prepared::run`].
pub fn run(scenario: &Scenario) -> Result<Report, ScenarioError> {
    scenario.prepare(None)?.run()
}
