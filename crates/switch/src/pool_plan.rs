//! What every process of a software-switch run of **pool protocols** (SwitchML, ATP, DSA:
//! `[[traffic]] kind = "training"`) derives from the scenario file: the simulator's own
//! [`TrainingWorld`] (job placement, the switch that aggregates each job, every worker's
//! partitions and start time from the scenario's seed, window parameters, the switch programs
//! and parameter servers), the fabric, forwarding tables and UDP endpoints (as [`crate::Plan`]).
//!
//! Nothing is copied from the simulator's driver but what it exposes: a switch process takes
//! its node's program out of a `TrainingWorld` built from the same file
//! ([`TrainingWorld::take_program`]), a PS agent its job's parameter server
//! ([`TrainingWorld::take_ps`]), a worker agent builds its packets with
//! [`reducelab_sim::training_run::gradient_packet`] and checks results with
//! [`reducelab_sim::training_run::check_result`], the simulator's functions; a job's two-level
//! tree (`aggregation = "tree"`) is the simulator's [`TrainingWorld::job_tree`].

use reducelab_ina::fabric::Fabric;
use reducelab_ina::pool::{Dest, PoolProgram};
use reducelab_ina::training::{DnnModel, Partition};
use reducelab_sim::ina_run::fabric_of;
use reducelab_sim::training_run::{Ps, TrainingSpec, TrainingWorld, Tree};
use reducelab_sim::Traffic;
use reducelab_topo::Topology;
use reducelab_transport::worker::WorkerParams;

use crate::plan::{EndpointSpec, Endpoints};

/// Whether a scenario's traffic is training jobs (the pool protocols), not in-network allreduces.
pub fn is_training(text: &str, seed: Option<u64>) -> bool {
    reducelab_sim::load_scenario_str(text, seed)
        .is_ok_and(|sc| sc.traffic.iter().any(|t| matches!(t, Traffic::Training(_))))
}

/// One job as the hosts and switches of a run see it.
#[derive(Clone, Debug)]
pub struct PoolJob {
    /// The switch that aggregates the job (the simulator's `nearest_switch`).
    pub switch: u32,
    /// Worker hosts by rank.
    pub workers: Vec<u32>,
    pub ps: Option<u32>,
    /// PSNs of the epoch per worker.
    pub psns: u32,
    pub params: WorkerParams,
    /// Per rank: the partitions (PSN ranges, ready times from the run's start, with the job's
    /// start time and the worker's jitter drawn from the seed as in the simulator).
    pub plans: Vec<Vec<Partition>>,
    pub model: DnnModel,
    /// `aggregation = "tree"`: the job's two-level tree (its leaves' programs aggregate their
    /// workers, `switch` is the root), the simulator's ([`TrainingWorld::job_tree`]).
    pub tree: Option<Tree>,
}

/// What a host is in a pool run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Worker { job: u16, rank: u16 },
    Ps { job: u16 },
}

/// A scenario's training jobs, laid out for the software switch.
pub struct PoolPlan {
    pub name: String,
    pub seed: u64,
    pub topology: Topology,
    pub fabric: Fabric,
    pub spec: TrainingSpec,
    pub jobs: Vec<PoolJob>,
    pub salt: u64,
    pub link_bps: u64,
    /// The scenario's `network.ecn_threshold_bytes`: a shaped port's default ECN threshold.
    pub ecn_threshold_bytes: Option<u64>,
    pub endpoints: Endpoints,
    routes: Vec<Vec<Vec<u16>>>,
}

impl PoolPlan {
    /// From a scenario's text with one `training` entry (`seed` overrides the scenario's).
    /// Errors name the field.
    pub fn from_scenario(
        text: &str,
        seed: Option<u64>,
        endpoints: impl Into<EndpointSpec>,
    ) -> Result<PoolPlan, String> {
        let sc = reducelab_sim::load_scenario_str(text, seed).map_err(|e| e.to_string())?;
        let specs: Vec<&TrainingSpec> =
            sc.traffic.iter().filter_map(|t| if let Traffic::Training(s) = t { Some(s) } else { None }).collect();
        if specs.len() != 1 || sc.traffic.len() != 1 {
            return Err(format!(
                "traffic: the software switch runs one training entry alone (found {} training entries among {})",
                specs.len(),
                sc.traffic.len()
            ));
        }
        let spec = specs[0].clone();
        let topo = sc.topology.clone();
        let endpoints = endpoints.into().resolve(&topo.nodes.iter().map(|n| n.ports.len()).collect::<Vec<_>>())?;
        let world = TrainingWorld::new(&topo, spec.clone(), sc.seed)?;
        let mut jobs = Vec::new();
        for j in 0..world.job_count() as u16 {
            let js = world.job_spec(j);
            jobs.push(PoolJob {
                switch: world.job_switch(j),
                workers: js.workers.clone(),
                ps: js.ps,
                psns: world.job_psns(j),
                params: world.worker_params(j),
                plans: (0..js.workers.len() as u16).map(|r| world.worker_plan(j, r).to_vec()).collect(),
                model: js.model,
                tree: world.job_tree(j).cloned(),
            });
        }
        let fabric = fabric_of(&topo);
        let routes = crate::plan::routes_of(&fabric);
        Ok(PoolPlan {
            name: sc.name.clone(),
            seed: sc.seed,
            salt: world.salt(),
            link_bps: world.link_bps(),
            ecn_threshold_bytes: sc.net.ecn_threshold_bytes,
            topology: topo,
            fabric,
            spec,
            jobs,
            endpoints,
            routes,
        })
    }

    fn world(&self) -> Result<TrainingWorld, String> {
        TrainingWorld::new(&self.topology, self.spec.clone(), self.seed)
    }

    /// Switch `node`'s program as the simulator builds it (`None`: no job aggregates there).
    pub fn program(&self, node: u32) -> Result<Option<Box<dyn PoolProgram>>, String> {
        self.check_switch(node)?;
        Ok(self.world()?.take_program(node))
    }

    /// Job `j`'s parameter server as the simulator builds it.
    pub fn parameter_server(&self, j: u16) -> Result<Option<Ps>, String> {
        Ok(self.world()?.take_ps(j))
    }

    pub fn check_switch(&self, node: u32) -> Result<(), String> {
        crate::plan::check_switch(&self.fabric, node)
    }

    pub fn switches(&self) -> Vec<u32> {
        crate::plan::switches_of(&self.fabric)
    }

    /// Hosts with a role (workers and parameter servers), ascending.
    pub fn hosts(&self) -> Vec<u32> {
        let mut h: Vec<u32> = self.jobs.iter().flat_map(|j| j.workers.iter().copied().chain(j.ps)).collect();
        h.sort_unstable();
        h
    }

    pub fn role(&self, host: u32) -> Option<Role> {
        for (j, job) in self.jobs.iter().enumerate() {
            if let Some(r) = job.workers.iter().position(|&w| w == host) {
                return Some(Role::Worker { job: j as u16, rank: r as u16 });
            }
            if job.ps == Some(host) {
                return Some(Role::Ps { job: j as u16 });
            }
        }
        None
    }

    /// The node a packet of job `job` to `dst` goes to (`None`: no such job, rank or PS).
    pub fn dst_node(&self, job: u16, dst: Dest) -> Option<u32> {
        let j = self.jobs.get(job as usize)?;
        match dst {
            Dest::Switch | Dest::Workers => Some(j.switch),
            Dest::Ps => j.ps.map(|h| self.fabric.host_nodes[h as usize]),
            Dest::Worker(r) => j.workers.get(r as usize).map(|&h| self.fabric.host_nodes[h as usize]),
        }
    }

    /// Egress port of switch `node` towards node `dst` (ECMP by `key` among shortest paths).
    pub fn route(&self, node: u32, dst: u32, key: u32) -> Option<u16> {
        crate::plan::route_in(&self.routes, node, dst, key)
    }
}
