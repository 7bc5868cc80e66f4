//! A lower bound on what any cluster holding a set of pods costs per hour: no packing, by anyone,
//! on a given catalog, is cheaper. Pure, no I/O.
//!
//! The bound is a linear programme, solved with `good_lp` over the pure-Rust `microlp` solver.
//! One variable per instance type, `x_t ≥ 0`, how many nodes of it (fractions allowed); minimise
//! `Σ price_t · x_t` subject to, for every *fit set* `F` (the instance types one of the pods fits
//! on; the whole catalog is one) and every resource `r` the pods request (`pods` counts one per
//! pod):
//!
//! ```text
//! Σ_{t ∈ F} allocatable_t[r] · x_t  ≥  Σ_{pods p whose fit set is within F} request_p[r]
//! ```
//!
//! Why it is a bound: in any real placement the pods whose fit set lies within `F` run on nodes
//! of types in `F`, and those nodes' allocatable covers their requests, resource by resource. So
//! every placement's node counts satisfy the constraints, and the minimum over fractional counts
//! is no more than the cheapest placement's price. The catalog-wide constraints alone are the LP
//! relaxation of bin packing; the fit-set ones make it tighter when pods are too large for the
//! types that are cheapest per unit (a 6-CPU pod cannot use fractions of 4-CPU nodes).
//!
//! What it leaves out, so where a placement may cost more than the bound: that a node is whole,
//! that pods do not split across nodes, and topology (spread, anti-affinity), which only ever add
//! nodes.

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use good_lp::{Expression, ProblemVariables, Solution, SolverModel, Variable, microlp, variable};

use super::resources::Resources;

/// One instance type as the bound sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Shape {
    pub name: String,
    /// What pods may use on a node of it (capacity − overhead − DaemonSets).
    pub allocatable: Resources,
    /// The price per hour of its cheapest offering the pods may use.
    pub price: f64,
}

/// The bound, and the fractional nodes that reach it.
#[derive(Clone, Debug, PartialEq)]
pub struct Floor {
    /// Price per hour.
    pub price: f64,
    /// Instance types with a non-zero count, by name.
    pub nodes: BTreeMap<String, f64>,
}

/// Why there is no bound.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FloorError {
    #[error("pod {0} fits no instance type of the catalog")]
    Unplaceable(usize),
    #[error("a price is not a finite non-negative number: {0}")]
    Price(String),
    #[error("the LP solver failed: {0}")]
    Solver(String),
}

/// The lower bound on the price per hour of nodes of `shapes` that hold `pods` (their requests;
/// each also takes one of `pods`).
pub fn floor(pods: &[Resources], shapes: &[Shape]) -> Result<Floor, FloorError> {
    if let Some(bad) = shapes
        .iter()
        .find(|s| !s.price.is_finite() || s.price < 0.0)
    {
        return Err(FloorError::Price(bad.name.clone()));
    }
    let requests: Vec<Resources> = pods
        .iter()
        .map(|p| {
            let mut p = p.clone();
            p.pods = 1;
            p
        })
        .collect();
    // Each pod's fit set, and the distinct ones.
    let mut fit_sets: Vec<Vec<bool>> = Vec::new();
    let mut set_of: Vec<usize> = Vec::with_capacity(requests.len());
    for (i, request) in requests.iter().enumerate() {
        let fits: Vec<bool> = shapes
            .iter()
            .map(|s| request.fits_in(&s.allocatable))
            .collect();
        if !fits.contains(&true) {
            return Err(FloorError::Unplaceable(i));
        }
        let at = match fit_sets.iter().position(|f| *f == fits) {
            Some(at) => at,
            None => {
                fit_sets.push(fits);
                fit_sets.len() - 1
            }
        };
        set_of.push(at);
    }
    if requests.is_empty() {
        return Ok(Floor {
            price: 0.0,
            nodes: BTreeMap::new(),
        });
    }
    let whole = vec![true; shapes.len()];
    if !fit_sets.contains(&whole) {
        fit_sets.push(whole);
    }
    // The resources requested, each scaled by its total so the coefficients stay near 1.
    let mut total = Resources::default();
    for request in &requests {
        total.add(request);
    }
    let resources: Vec<(&str, f64)> = total.iter().map(|(n, v)| (n, v as f64)).collect();

    let mut variables = ProblemVariables::new();
    let counts: Vec<Variable> = shapes
        .iter()
        .map(|_| variables.add(variable().min(0)))
        .collect();
    let objective: Expression = shapes.iter().zip(&counts).map(|(s, &x)| s.price * x).sum();
    let mut problem = variables.minimise(objective.clone()).using(microlp);
    for set in &fit_sets {
        let within = |g: usize| fit_sets[g].iter().zip(set).all(|(&a, &b)| !a || b);
        let mut demand = Resources::default();
        for (request, &g) in requests.iter().zip(&set_of) {
            if within(g) {
                demand.add(request);
            }
        }
        for &(name, scale) in &resources {
            let need = demand.get(name) as f64 / scale;
            if need <= 0.0 {
                continue;
            }
            let supply: Expression = shapes
                .iter()
                .zip(&counts)
                .zip(set)
                .filter(|(_, in_set)| **in_set)
                .map(|((s, &x), _)| (s.allocatable.get(name) as f64 / scale) * x)
                .sum();
            problem = problem.with(supply.geq(need));
        }
    }
    let solution = problem
        .solve()
        .map_err(|e| FloorError::Solver(e.to_string()))?;
    let nodes = shapes
        .iter()
        .zip(&counts)
        .map(|(s, &x)| (s.name.clone(), solution.value(x)))
        .filter(|(_, n)| *n > 1e-9)
        .collect();
    Ok(Floor {
        price: solution.eval(&objective).max(0.0),
        nodes,
    })
}
