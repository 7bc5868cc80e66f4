//! Setting the solver up: the domain universe of every topology key, which bins each pool's
//! types can reach, and the fixed bins of existing nodes and in-flight claims with their
//! daemon overhead, filed in the bin index.

use super::*;

impl<'a> Solver<'a> {
    /// Registers the domain universe of every topology key in use: what pools and their instance
    /// types and offerings allow, and what existing capacity carries.
    pub(super) fn register_domains(&mut self) {
        let keys: Vec<String> = self.topology.key_names().map(str::to_owned).collect();
        let mut universe: Vec<(String, Vec<String>)> = Vec::with_capacity(keys.len());
        for key in keys {
            let mut values: BTreeSet<&str> = BTreeSet::new();
            for pool in &self.pools {
                let allowed = pool.template.set_of(&key);
                if let Some(set) = allowed.filter(|s| !s.is_complement()) {
                    values.extend(set.values().iter().map(String::as_str));
                }
                for &i in &pool.catalog.types {
                    values.extend(type_domains(pool, &pool.view.instance_types[i], &key));
                }
            }
            for node in &self.input.existing_nodes {
                values.extend(node_label(&node.labels, &node.name, &key));
            }
            for claim in &self.input.inflight_claims {
                let value = claim
                    .requirements
                    .set_of(&key)
                    .and_then(ValueSet::single_value)
                    .or_else(|| (key == HOSTNAME).then_some(claim.name.as_str()));
                values.extend(value);
            }
            let values = values.into_iter().map(str::to_owned).collect();
            universe.push((key, values));
        }
        for (key, values) in universe {
            for v in values {
                self.topology.register(&key, &v);
            }
        }
    }

    /// Spread groups on a key other than the hostname take part only in the domains where a node
    /// they count can be: those of the existing nodes and in-flight claims they admit, and those a
    /// pool could still *launch* a node they admit in. As in kube-scheduler, a zone only another
    /// pool's nodes reach (say, amd64 nodes for arm64 pods, or, under `nodeTaintsPolicy: Honor`,
    /// nodes behind an untolerated taint) does not hold the skew down at zero; and neither does a
    /// zone only a pool reaches that can launch nothing there for these pods: its limits leave
    /// room for no instance type (or none that holds the smallest of the pods), or none of its
    /// types fits them at all. Pools that are not Ready or static never reach the solver. When a
    /// pool's limits run out within the run, this is worked out again, the claims the run opened
    /// counting as claims in flight.
    pub(super) fn register_reachable(&mut self) {
        let input = self.input;
        let well_known = |k: &str| self.well_known.contains(k);
        // Per group, the least of its pods' requests, resource by resource: a type that cannot
        // hold that holds none of them.
        let mut least: Vec<Option<Resources>> = vec![None; self.topology.group_count()];
        for state in &self.pods {
            for &g in &state.owned {
                match &mut least[g] {
                    Some(r) => r.min_assign(&state.requests),
                    slot @ None => *slot = Some(state.requests.clone()),
                }
            }
        }
        let mut found: Vec<(GroupId, BTreeSet<&str>)> = Vec::new();
        for (g, least) in least.iter().enumerate() {
            let spec = self.topology.spec(g);
            let key = self.topology.group_key(g);
            if spec.kind != GroupKind::Spread || spec.inverse || Some(key) == self.hostname_key {
                continue;
            }
            let key_name = self.topology.key_name(key);
            let unfiltered = [Requirements::new()];
            let terms = if spec.node_filter.is_empty() {
                &unfiltered[..]
            } else {
                &spec.node_filter[..]
            };
            let term_allows =
                |term: &Requirements, v: &str| term.set_of(key_name).is_none_or(|s| s.contains(v));
            let mut values: BTreeSet<&str> = BTreeSet::new();
            for pool in &self.pools {
                if !spec.admits_taints(&pool.view.taints) {
                    continue;
                }
                let allowed = pool.template.set_of(key_name);
                for term in terms {
                    if pool.template.compatible(term, well_known).is_err() {
                        continue;
                    }
                    let mut any_type = false;
                    for (t, &i) in pool.catalog.types.iter().enumerate() {
                        let it = &pool.view.instance_types[i];
                        let launchable = pool.catalog.within_limits.contains(t)
                            && least
                                .as_ref()
                                .is_none_or(|r| r.fits_in(&pool.catalog.alloc[t]));
                        if !launchable || it.requirements.intersects(term).is_err() {
                            continue;
                        }
                        any_type = true;
                        values.extend(
                            type_domains(pool, it, key_name).filter(|v| term_allows(term, v)),
                        );
                    }
                    // The pool's own values for the key (a label it sets), when it can launch
                    // anything the term admits.
                    if let Some(set) = allowed.filter(|s| any_type && !s.is_complement()) {
                        values.extend(
                            set.values()
                                .iter()
                                .map(String::as_str)
                                .filter(|v| term_allows(term, v)),
                        );
                    }
                }
            }
            let strict = |_: &str| false;
            for node in &input.existing_nodes {
                let labels = Requirements::from_labels(
                    node.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())),
                );
                if spec.admits_taints(&node.taints)
                    && terms.iter().any(|t| labels.compatible(t, strict).is_ok())
                {
                    values.extend(node_label(&node.labels, &node.name, key_name));
                }
            }
            // Claims in flight, and the claims this run opened so far (none on the first call).
            let claims = input
                .inflight_claims
                .iter()
                .map(|c| (&c.requirements, &c.taints[..]))
                .chain(
                    self.bins[self.fixed..]
                        .iter()
                        .map(|b| (&b.requirements, b.taints)),
                );
            for (requirements, taints) in claims {
                if spec.admits_taints(taints)
                    && terms
                        .iter()
                        .any(|t| requirements.compatible(t, well_known).is_ok())
                {
                    values.extend(
                        requirements
                            .set_of(key_name)
                            .and_then(ValueSet::single_value),
                    );
                }
            }
            found.push((g, values));
        }
        for (g, values) in found {
            self.topology.set_reachable(g, values.into_iter());
        }
        self.reach_stale = false;
    }

    /// Existing nodes (initialized first, then by name) and in-flight claims (by name), with the
    /// topology counts of the pods already on them.
    pub(super) fn add_fixed_bins(&mut self, daemonsets: &[(&Pod, Requirements)]) {
        let input = self.input;
        let mut nodes: Vec<usize> = (0..input.existing_nodes.len()).collect();
        nodes.sort_by(|&a, &b| {
            let (a, b) = (&input.existing_nodes[a], &input.existing_nodes[b]);
            b.initialized
                .cmp(&a.initialized)
                .then_with(|| a.name.cmp(&b.name))
        });
        let mut claims: Vec<usize> = (0..input.inflight_claims.len()).collect();
        claims.sort_by(|&a, &b| {
            input.inflight_claims[a]
                .name
                .cmp(&input.inflight_claims[b].name)
        });

        for i in nodes {
            let node = &input.existing_nodes[i];
            let mut requirements = Requirements::from_labels(
                node.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            );
            if !requirements.has(HOSTNAME) {
                requirements.add(Requirement::in_(HOSTNAME, [node.name.as_str()]));
            }
            self.push_fixed(
                BinKind::Node(i),
                requirements,
                &node.taints,
                node.used.clone(),
                &node.allocatable,
                &node.pods,
                Some(&node.volume_limits).filter(|l| !l.is_empty()),
                node.devices.as_ref().map(|d| &d.0),
            );
        }
        for i in claims {
            let claim = &input.inflight_claims[i];
            let mut requirements = claim.requirements.clone();
            if !requirements.has(HOSTNAME) {
                requirements.add(Requirement::in_(HOSTNAME, [claim.name.as_str()]));
            }
            let mut requests = claim.used.clone();
            for (ds, reqs) in daemonsets {
                if first_untolerated(&claim.taints, &ds.tolerations).is_none()
                    && requirements
                        .compatible(reqs, |k| self.well_known.contains(k))
                        .is_ok()
                {
                    requests.add(&ds.requests);
                    requests.pods += 1;
                }
            }
            self.push_fixed(
                BinKind::Claim(i),
                requirements,
                &claim.taints,
                requests,
                &claim.allocatable,
                &claim.pods,
                None,
                claim.devices.as_ref().map(|d| &d.0),
            );
        }
        self.fixed = self.bins.len();
        // Fixed bins have fixed allocatable; anything else would be filed as room for all.
        self.fixed_room = FixedRoom::new(self.bins.iter().map(|bin| match &bin.capacity {
            Capacity::Fixed(alloc) => Some((&bin.requests, alloc)),
            Capacity::Types { .. } => None,
        }));
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn push_fixed(
        &mut self,
        kind: BinKind,
        requirements: Requirements,
        taints: &'a [Taint],
        requests: Resources,
        allocatable: &Resources,
        running: &[Arc<Pod>],
        volume_limits: Option<&'a BTreeMap<String, i64>>,
        devices: Option<&'a capstan_dra::Inventory>,
    ) {
        let host_domain = self.hostname_domain(&requirements);
        // Count the running pods in every group that selects them, and where the ones with
        // required anti-affinity are.
        let strict = |_: &str| false;
        for pod in running {
            for g in 0..self.topology.group_count() {
                let spec = self.topology.spec(g);
                if spec.inverse || !self.topology.selects(g, pod) {
                    continue;
                }
                if !self.topology.node_counts(g, &requirements, taints, &strict) {
                    continue;
                }
                let key = self
                    .topology
                    .key_name(self.topology.group_key(g))
                    .to_owned();
                self.topology
                    .record_set(g, requirements.set_of(&key), false);
            }
            for spec in inverse_specs(pod) {
                if let Some(g) = self.topology.existing_group(&spec) {
                    self.topology
                        .record_set(g, requirements.set_of(&spec.key), true);
                }
            }
        }
        self.bins.push(Bin {
            kind,
            requirements,
            taints,
            requests,
            capacity: Capacity::Fixed(allocatable.clone()),
            pods: Vec::new(),
            open_labels: false,
            host_domain,
            key_domains: Vec::new(),
            host_ports: running
                .iter()
                .flat_map(|pod| pod.host_ports.iter().cloned())
                .collect(),
            volume_limits,
            volumes: match volume_limits {
                Some(_) => running
                    .iter()
                    .flat_map(|pod| pod.csi_volumes.iter().cloned())
                    .collect(),
                None => Vec::new(),
            },
            devices,
            claims: Vec::new(),
        });
        self.index_last_bin(false);
    }

    /// Adds the last bin to the index, after catching the index up with hostname counts.
    pub(super) fn index_last_bin(&mut self, new_claim: bool) {
        self.sync_occupied();
        let b = self.bins.len() - 1;
        let host = self.bins[b].host_domain;
        let topology = &self.topology;
        let occupied: Vec<GroupId> = match host {
            Some(d) => self
                .index
                .occupancy_groups()
                .filter(|&g| topology.count(g, d) > 0)
                .collect(),
            None => Vec::new(),
        };
        let listed = self
            .index
            .tracked_keys()
            .map(|k| (k, self.listed(b, k)))
            .collect();
        self.index
            .add_bin(b, host, occupied.into_iter(), listed, new_claim);
    }

    /// Tells the index which hostnames became occupied in which groups.
    pub(super) fn sync_occupied(&mut self) {
        self.topology.take_occupied(&mut self.occupied);
        for &(g, d) in &self.occupied {
            self.index.occupy(g, d);
        }
    }

    /// The domains bin `b`'s requirements list for topology key `key`.
    pub(super) fn listed(&self, b: usize, key: usize) -> Listed {
        let topology = &self.topology;
        match self.bins[b].requirements.set_of(topology.key_name(key)) {
            Some(set) if !set.is_complement() => set
                .values()
                .iter()
                .map(|v| topology.domain(key, v))
                .collect::<Option<Vec<DomainId>>>()
                .map_or(Listed::Unlisted, Listed::Ids),
            _ => Listed::Unlisted,
        }
    }

    pub(super) fn hostname_domain(&self, requirements: &Requirements) -> Option<DomainId> {
        let key = self.hostname_key?;
        let host = requirements.set_of(HOSTNAME)?.single_value()?;
        self.topology.domain(key, host)
    }
}

/// The values instance type `it` of `pool` can give `key` on a node: its own (a listed set) and,
/// for zones, those of its available offerings, as far as the pool's template allows them.
pub(super) fn type_domains<'p, 'a>(
    pool: &'p Pool<'a>,
    it: &'p InstanceType,
    key: &str,
) -> impl Iterator<Item = &'p str> + use<'p, 'a> {
    let allowed = pool.template.set_of(key);
    let is_zone = key == ZONE;
    let own = it
        .requirements
        .set_of(key)
        .filter(|s| !s.is_complement())
        .into_iter()
        .flat_map(|s| s.values().iter().map(String::as_str));
    let zones = it
        .offerings
        .iter()
        .filter(move |o| is_zone && o.available)
        .map(|o| o.zone.as_str());
    own.chain(zones)
        .filter(move |v| allowed.is_none_or(|a| a.contains(v)))
}

/// The value a node or claim carries for `key`; hostnames fall back to the object's name.
pub(super) fn node_label<'l>(
    labels: &'l BTreeMap<String, String>,
    name: &'l str,
    key: &str,
) -> Option<&'l str> {
    labels
        .get(key)
        .map(String::as_str)
        .or_else(|| (key == HOSTNAME).then_some(name))
}
