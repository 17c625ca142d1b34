//! What every process of a software-switch run of **pool protocols** (SwitchML, ATP, DSA:
//! `[[traffic]] kind = "training"`) derives from the scenario file: the jobs' layout
//! ([`TrainingSpec::layout`]: job placement, the switch that aggregates each job, its two-level
//! tree with `aggregation = "tree"`, every worker's partitions and start time from the
//! scenario's seed), the window parameters, the switch programs and parameter servers, the
//! fabric, forwarding tables and UDP endpoints (as [`crate::InaPlan`]).
//!
//! All of it comes from `reducelab_ina::pool_jobs`, which the simulator's driver uses too:
//! a switch process builds its node's program with [`TrainingSpec::switch_program`], a PS
//! agent its job's parameter server with [`TrainingSpec::parameter_server`], a worker agent
//! its packets with [`reducelab_ina::pool_jobs::gradient_packet`] and checks results with
//! [`reducelab_ina::pool_jobs::check_result`].

use reducelab_ina::fabric::Fabric;
use reducelab_ina::pool::{Dest, PoolProgram};
use reducelab_ina::pool_jobs::{AnyPoolProgram, PoolProtocol, Ps, TrainingLayout, TrainingSpec, Tree};
use reducelab_ina::pool_node::{JobRoute, PoolNodes};
use reducelab_ina::training::{DnnModel, Partition};
use reducelab_scenario::ina::{collective_salt, fabric_of};
use reducelab_scenario::Traffic;
use reducelab_topo::Topology;
use reducelab_transport::worker::WorkerParams;

use crate::plan::{EndpointSpec, Endpoints};

/// Whether a scenario's traffic is training jobs (the pool protocols), not in-network allreduces.
pub fn is_training(text: &str, seed: Option<u64>) -> bool {
    reducelab_scenario::load_scenario_str(text, seed)
        .is_ok_and(|sc| sc.traffic.iter().any(|t| matches!(t, Traffic::Training(_))))
}

/// One job as the hosts and switches of a run see it.
#[derive(Clone, Debug)]
pub struct PoolJob {
    /// The switch that aggregates the job ([`reducelab_ina::pool_jobs::JobLayout::switch`]).
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
    /// workers, `switch` is the root).
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
    /// Aggregators per switch, and per node the (job, workers) its program aggregates
    /// ([`TrainingLayout`]'s; the rest of the layout is in `jobs`).
    aggregators: u32,
    switch_jobs: Vec<Vec<(u16, u16)>>,
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
        let sc = reducelab_scenario::load_scenario_str(text, seed).map_err(|e| e.to_string())?;
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
        let fabric = fabric_of(&topo);
        let layout = spec.layout(&fabric, sc.seed)?;
        let params: Vec<_> = (0..spec.jobs.len()).map(|j| spec.worker_params(&layout, j as u16)).collect();
        let TrainingLayout { aggregators, jobs: laid_out, switch_jobs, .. } = layout;
        let jobs = spec
            .jobs
            .iter()
            .zip(laid_out)
            .zip(params)
            .map(|((js, at), params)| PoolJob {
                switch: at.switch,
                workers: js.workers.clone(),
                ps: js.ps,
                psns: at.psns,
                params,
                plans: at.plans,
                model: js.model,
                tree: at.tree,
            })
            .collect();
        let routes = crate::plan::routes_of(&fabric);
        Ok(PoolPlan {
            name: sc.name.clone(),
            seed: sc.seed,
            salt: collective_salt(sc.seed),
            // The slowest link's rate, as the simulator's (DSA's priorities are computed for it).
            link_bps: topo.links.iter().map(|l| l.bandwidth_bps).min().unwrap_or(1).max(1),
            ecn_threshold_bytes: sc.net.ecn_threshold_bytes,
            topology: topo,
            fabric,
            spec,
            jobs,
            aggregators,
            switch_jobs,
            endpoints,
            routes,
        })
    }

    /// Switch `node`'s program, new (`None`: no job aggregates there).
    pub fn program(&self, node: u32) -> Result<Option<Box<dyn PoolProgram>>, String> {
        self.check_switch(node)?;
        let js = self.switch_jobs.get(node as usize).map_or(&[][..], |js| &js[..]);
        Ok(self.spec.switch_program(self.aggregators, js, self.seed)?.map(AnyPoolProgram::boxed))
    }

    /// The switch nodes' logic over the jobs' routes (the simulator's).
    pub fn nodes(&self) -> PoolNodes {
        let routes = self
            .jobs
            .iter()
            .map(|j| JobRoute { switch: j.switch, tree: j.tree.clone(), workers: j.workers.clone(), ps: j.ps })
            .collect();
        PoolNodes::new(
            routes,
            self.spec.tree,
            self.spec.protocol == PoolProtocol::Atp,
            matches!(self.spec.protocol, PoolProtocol::Dsa(_)),
        )
    }

    /// Job `j`'s parameter server, new.
    pub fn parameter_server(&self, j: u16) -> Result<Option<Ps>, String> {
        if j as usize >= self.spec.jobs.len() {
            return Ok(None);
        }
        self.spec.parameter_server(j)
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
