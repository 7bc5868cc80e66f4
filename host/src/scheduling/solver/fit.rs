//! Placing one pod: the bins the index and the hostname filters leave, then each attempt
//! ([`Solver::try_add`]) checking, cheapest first, taints, host ports and volumes, resources
//! against the bin's best case, node requirements, topology, and for a new claim the instance
//! types that survive; a claim opened when no bin takes the pod; the reasons a pod fits nowhere.

use super::*;

impl<'a> Solver<'a> {
    /// The hostname rules of pod `p` that can rule a bin out from its hostname's counts alone,
    /// into `self.host_filters`: the same verdicts [`Topology::allowed_domains`] reaches, without
    /// the rest of an attempt.
    pub(super) fn collect_host_filters(&mut self, p: usize) {
        self.host_filters.clear();
        self.domain_filters.clear();
        self.index.begin(self.bins.len());
        let st = &self.pods[p];
        for &g in st.owned.iter().chain(&st.repelled_by) {
            let spec = self.topology.spec(g);
            let selects = spec.inverse || st.selected_by.binary_search(&g).is_ok();
            let key = self.topology.group_key(g);
            // Affinity fails on a bin without a populated domain unless the pod may bootstrap.
            let bootstraps = spec.kind == GroupKind::Affinity
                && selects
                && !self
                    .topology
                    .any_populated(g, st.strict.set_of(self.topology.key_name(key)));
            if Some(key) != self.hostname_key {
                if spec.kind == GroupKind::Affinity && !bootstraps {
                    let mut populated = Vec::new();
                    self.topology.populated_domains(g, &mut populated);
                    self.index.restrict_domains(key, &populated);
                    self.domain_filters.push((key, populated));
                }
                continue;
            }
            match spec.kind {
                GroupKind::AntiAffinity => {
                    self.index.restrict_host(g, false);
                    self.host_filters.push(HostFilter::AtMost(g, 0));
                }
                GroupKind::Spread => {
                    let limit = i64::from(spec.max_skew) - i64::from(selects);
                    match u32::try_from(limit) {
                        Ok(0) => {
                            self.index.restrict_host(g, false);
                            self.host_filters.push(HostFilter::AtMost(g, 0));
                        }
                        Ok(limit) => self.host_filters.push(HostFilter::AtMost(g, limit)),
                        Err(_) => self.host_filters.push(HostFilter::Never),
                    }
                }
                GroupKind::Affinity if !bootstraps => {
                    self.index.restrict_host(g, true);
                    self.host_filters.push(HostFilter::Populated(g));
                }
                GroupKind::Affinity => {}
            }
        }
    }

    /// Whether the host filters rule bin `b` out.
    #[inline]
    pub(super) fn host_filtered(&self, b: usize) -> bool {
        let Some(d) = self.bins[b].host_domain else {
            return false;
        };
        self.host_filters.iter().any(|f| match *f {
            HostFilter::AtMost(g, limit) => self.topology.count(g, d) > limit,
            HostFilter::Populated(g) => self.topology.count(g, d) == 0,
            HostFilter::Never => true,
        })
    }

    /// Whether the domain filters rule bin `b` out: its listed domains for a filter's key hold
    /// no populated one, the verdict [`Topology::allowed_domains`] would reach.
    pub(super) fn domain_filtered(&mut self, b: usize) -> bool {
        for i in 0..self.domain_filters.len() {
            let key = self.domain_filters[i].0;
            self.cache_key_domains(b, key);
            let Some(KeyDomains::Ids(ids)) = self.bins[b].key_domains.get(key) else {
                continue;
            };
            let populated = &self.domain_filters[i].1;
            if !ids.iter().any(|d| populated.binary_search(d).is_ok()) {
                return true;
            }
        }
        false
    }

    /// Fills `bins[b].key_domains[key]` if it is not known yet.
    pub(super) fn cache_key_domains(&mut self, b: usize, key: usize) {
        let topology = &self.topology;
        let bin = &mut self.bins[b];
        if bin.key_domains.len() < topology.key_count() {
            bin.key_domains
                .resize(topology.key_count(), KeyDomains::Unknown);
        }
        if !matches!(bin.key_domains.get(key), Some(KeyDomains::Unknown)) {
            return;
        }
        let domains = match bin.requirements.set_of(topology.key_name(key)) {
            Some(set) if !set.is_complement() => set
                .values()
                .iter()
                .map(|v| topology.domain(key, v))
                .collect::<Option<Vec<DomainId>>>()
                .map_or(KeyDomains::Unlisted, KeyDomains::Ids),
            _ => KeyDomains::Unlisted,
        };
        if let Some(slot) = bin.key_domains.get_mut(key) {
            *slot = domains;
        }
    }

    /// Places pod `p`: existing capacity in order, then the claims this run opened (fewest pods
    /// first, then oldest), then a new claim. Only the bins the index keeps are tried.
    pub(super) fn add(&mut self, p: usize) -> Result<(), String> {
        if self.reach_stale {
            self.register_reachable();
        }
        self.collect_host_filters(p);
        #[cfg(test)]
        if self.scan {
            return self.add_by_scan(p);
        }
        let words = self.index.candidate_words();
        let fixed_words = self.fixed.div_ceil(64);
        let classes = FixedRoom::classes(&self.pods[p].requests);
        for w in words.start..words.end.min(fixed_words) {
            let below_fixed = match self.fixed - w * 64 {
                n if n >= 64 => !0,
                n => (1u64 << n) - 1,
            };
            let mut word =
                self.index.candidate_word(w) & below_fixed & self.fixed_room.word(classes, w);
            while word != 0 {
                let b = w * 64 + word.trailing_zeros() as usize;
                word &= word - 1;
                if self.try_bin(b, p) {
                    return Ok(());
                }
            }
        }
        for k in 1..self.index.buckets() {
            if self.index.bucket_is_empty(k) {
                continue;
            }
            for w in words.clone() {
                let mut word = self.index.bucket_word(k, w) & self.index.candidate_word(w);
                while word != 0 {
                    let b = w * 64 + word.trailing_zeros() as usize;
                    word &= word - 1;
                    if self.try_bin(b, p) {
                        return Ok(());
                    }
                }
            }
        }
        self.open_claims(p)
    }

    /// [`Solver::add`] by scanning every bin in order, checking that the index keeps every bin
    /// the filters pass and buckets every open claim by its pod count.
    #[cfg(test)]
    pub(super) fn add_by_scan(&mut self, p: usize) -> Result<(), String> {
        let mut order: Vec<usize> = (self.fixed..self.bins.len()).collect();
        order.sort_by_key(|&b| (self.bins[b].pods.len(), b));
        for b in (0..self.fixed).chain(order) {
            if let BinKind::New { .. } = self.bins[b].kind {
                let pods = self.bins[b].pods.len();
                assert!(
                    self.index.bucket_contains(pods, b),
                    "bin {b} not in bucket {pods}"
                );
            }
            if self.host_filtered(b) || self.domain_filtered(b) {
                continue;
            }
            assert!(
                self.index.is_candidate(b),
                "the index dropped bin {b} for pod {p}"
            );
            if self.try_bin(b, p) {
                return Ok(());
            }
        }
        self.open_claims(p)
    }

    /// Tries pod `p` on bin `b` unless a host or domain filter rules it out.
    pub(super) fn try_bin(&mut self, b: usize, p: usize) -> bool {
        if self.host_filtered(b) || self.domain_filtered(b) || self.try_add(b, p, false).is_err() {
            return false;
        }
        if let Some(target) = self.target(b) {
            self.placements.push((p, target));
        }
        true
    }

    /// Opens a new claim for pod `p` from the first pool that can take it.
    pub(super) fn open_claims(&mut self, p: usize) -> Result<(), String> {
        if let Some(hits) = self.limit_hits.get_mut(p) {
            hits.clear();
        }
        let mut reasons = Vec::new();
        for pool in 0..self.pools.len() {
            match self.open_claim(pool, p) {
                Ok(()) => return Ok(()),
                Err(reason) => reasons.push(reason),
            }
        }
        if reasons.is_empty() {
            reasons.push("no nodepool can launch capacity".to_owned());
        }
        Err(reasons.join("; "))
    }

    /// What existing capacity bin `b` is (`None` for new claims, which are reported as claims).
    pub(super) fn target(&self, b: usize) -> Option<Target> {
        match self.bins[b].kind {
            BinKind::Node(i) => Some(Target::Node(self.input.existing_nodes[i].name.clone())),
            BinKind::Claim(i) => Some(Target::Claim(self.input.inflight_claims[i].name.clone())),
            BinKind::New { .. } => None,
        }
    }

    /// Opens a claim from `pools[pool]` for pod `p`, or says why the pool cannot take it.
    pub(super) fn open_claim(&mut self, pool: usize, p: usize) -> Result<(), String> {
        let input = self.input;
        let pod = &input.pods[p];
        let ps = &self.pools[pool];
        let name = &ps.view.name;
        if let Some(taint) = self.pods[p].untolerated(pod, &ps.view.taints) {
            return Err(format!(
                "incompatible with nodepool {name}: untolerated taint {taint}"
            ));
        }
        if ps.catalog.len() == 0 {
            return Err(format!(
                "nodepool {name} has no instance type compatible with its requirements and an available offering"
            ));
        }
        let mut mask = ps.catalog.all.clone();
        mask.intersect_with(&ps.catalog.within_limits);
        if mask.is_empty() {
            return Err(self.limit_refusal(pool, p, 0));
        }
        let max_alloc = ps.catalog.restrict_to_fit(&mut mask, &Resources::default());
        let hostname = format!("hostname-placeholder-{:04}", self.opened + 1);
        let mut requirements = ps.template.clone();
        requirements.add(Requirement::in_(HOSTNAME, [hostname.as_str()]));
        let host_domain = self.topology.register(HOSTNAME, &hostname);
        self.bins.push(Bin {
            kind: BinKind::New { pool },
            requirements,
            taints: &self.pools[pool].view.taints,
            requests: Resources::default(),
            capacity: Capacity::Types {
                mask,
                max_alloc,
                floor: None,
            },
            pods: Vec::new(),
            open_labels: true,
            host_domain,
            key_domains: Vec::new(),
            host_ports: Vec::new(),
            volume_limits: None,
            volumes: Vec::new(),
            devices: None,
            claims: Vec::new(),
        });
        self.index_last_bin(true);
        let b = self.bins.len() - 1;
        match self.try_add(b, p, true) {
            Ok(()) => {
                self.opened += 1;
                Ok(())
            }
            Err(reason) => {
                self.index.remove_last_bin(b, host_domain);
                self.bins.pop();
                // A pod that some type of the pool fits, but none the limits leave room for, is
                // refused by the limits.
                let ps = &self.pools[pool];
                if ps.room.is_some() {
                    let mut fits = ps.catalog.all.clone();
                    ps.catalog
                        .restrict_to_fit(&mut fits, &self.pods[p].requests);
                    if let Some(t) = fits.iter().next()
                        && !fits.intersects(&ps.catalog.within_limits)
                    {
                        return Err(self.limit_refusal(pool, p, t));
                    }
                }
                let pool_name = &self.pools[pool].view.name;
                let reason = reason.unwrap_or_default();
                // Instance-type failures already say which pool they are about.
                if reason.contains(&format!("nodepool {pool_name}")) {
                    Err(reason)
                } else {
                    Err(format!("incompatible with nodepool {pool_name}: {reason}"))
                }
            }
        }
    }

    /// "nodepool default limit cpu exceeded", for pod `p` that catalog type `t` of `pool` would
    /// fit but the pool's limits leave no room for; noted in [`Solver::limit_hits`].
    pub(super) fn limit_refusal(&mut self, pool: usize, p: usize, t: usize) -> String {
        let ps = &self.pools[pool];
        let capacity = &ps.view.instance_types[ps.catalog.types[t]].capacity;
        let resource = ps
            .room
            .as_ref()
            .and_then(|r| r.exceeded_by(capacity))
            .unwrap_or("resource")
            .to_owned();
        let reason = format!("nodepool {} limit {resource} exceeded", ps.view.name);
        if let Some(hits) = self.limit_hits.get_mut(p)
            && !hits.contains(&(pool, resource.clone()))
        {
            hits.push((pool, resource));
        }
        reason
    }

    /// Tries pod `p` on bin `b`; on success the pod is placed and topology updated.
    pub(super) fn try_add(&mut self, b: usize, p: usize, want: bool) -> Result<(), Option<String>> {
        let input = self.input;
        let pod = &input.pods[p];
        let st = &self.pods[p];
        let bin = &self.bins[b];

        // Taints.
        if let Some(taint) = st.untolerated(pod, bin.taints) {
            bail!(want, "untolerated taint {taint}");
        }
        if let Some(port) = host_port_conflict(&bin.host_ports, &pod.host_ports) {
            bail!(want, "host port {port} is already bound");
        }
        if let Some(limits) = bin.volume_limits
            && let Some((driver, limit)) =
                volume_limit_exceeded(limits, &bin.volumes, &pod.csi_volumes)
        {
            bail!(
                want,
                "the node attaches at most {limit} volume(s) of {driver}"
            );
        }
        // Devices: claims allocated already pin the pod to their node; existing capacity must
        // hold the rest besides what the pods placed on it take (a new claim's types are
        // narrowed below).
        if let Some(node) = &pod.devices.pinned_to {
            let here = match bin.kind {
                BinKind::Node(i) => input.existing_nodes[i].name == *node,
                _ => false,
            };
            if !here {
                bail!(want, "its ResourceClaims are allocated on node {node}");
            }
        }
        if !pod.devices.claims.is_empty()
            && matches!(bin.capacity, Capacity::Fixed(_))
            && let Err(why) = devices::fit(bin.devices, &bin.claims, &pod.devices.claims)
        {
            bail!(want, "{why}");
        }

        // Resources, against the best case.
        match &bin.capacity {
            Capacity::Fixed(alloc) => {
                if !bin.requests.fits_with(&st.requests, alloc) {
                    bail!(want, "does not fit: allocatable {alloc}");
                }
            }
            Capacity::Types {
                max_alloc, mask, ..
            } => {
                if !bin.requests.fits_with(&st.requests, max_alloc) {
                    if let BinKind::New { pool } = bin.kind {
                        bail!(want, "{}", self.no_fit_reason(pool, mask, pod));
                    }
                    bail!(want, "does not fit");
                }
            }
        }

        // Node requirements.
        let mut merged: Vec<(&str, ValueSet)> = Vec::new();
        if !st.requirements.is_empty() {
            let open = bin.open_labels;
            let well_known = &self.well_known;
            if let Err(e) = bin
                .requirements
                .compatible(&st.requirements, |k| open && well_known.contains(k))
            {
                bail!(want, "{e}");
            }
            for r in st.requirements.iter() {
                let set = match bin.requirements.set_of(r.key()) {
                    Some(existing) => {
                        let narrowed = existing.intersection(r.set());
                        if narrowed == *existing {
                            continue;
                        }
                        narrowed
                    }
                    None => r.set().clone(),
                };
                merged.push((r.key(), set));
            }
        }
        let merged_set = |key: &str| merged.iter().find(|(k, _)| *k == key).map(|(_, s)| s);

        // Topology.
        let topology = &self.topology;
        let scratch = &mut self.scratch;
        scratch.narrowed_len = 0;
        if st.has_topology() {
            for &g in st.owned.iter().chain(&st.repelled_by) {
                let key = topology.group_key(g);
                let key_name = topology.key_name(key);
                let overridden = merged_set(key_name);
                let hint = if overridden.is_none() && Some(key) == self.hostname_key {
                    bin.host_domain
                } else {
                    None
                };
                let node_domains = match hint {
                    Some(_) => None,
                    None => overridden.or_else(|| bin.requirements.set_of(key_name)),
                };
                let selects = topology.spec(g).inverse || st.selected_by.binary_search(&g).is_ok();
                let pod_domains = st.strict.set_of(key_name);
                if !topology.allowed_domains(
                    g,
                    selects,
                    pod_domains,
                    node_domains,
                    hint,
                    &mut scratch.domains,
                ) {
                    bail!(want, "{}", topology_reason(topology, g));
                }
                let live = scratch.narrowed_len;
                if let Some((_, allowed)) =
                    scratch.narrowed[..live].iter_mut().find(|(k, _)| *k == key)
                {
                    allowed.retain(|d| scratch.domains.binary_search(d).is_ok());
                    if allowed.is_empty() {
                        bail!(want, "{}", topology_reason(topology, g));
                    }
                } else {
                    if scratch.narrowed.len() == live {
                        scratch.narrowed.push((key, Vec::new()));
                    }
                    let entry = &mut scratch.narrowed[live];
                    entry.0 = key;
                    entry.1.clear();
                    entry.1.extend_from_slice(&scratch.domains);
                    scratch.narrowed_len += 1;
                }
            }
        }

        let requests = bin.requests.plus(&st.requests);

        // Instance types of a new claim.
        let mut new_max_alloc = None;
        let mut new_floor = None;
        if let (Capacity::Types { mask, floor, .. }, BinKind::New { pool }) =
            (&bin.capacity, bin.kind)
        {
            let ps = &mut self.pools[pool];
            scratch.mask.copy_from(mask);
            let mut offerings_changed = false;
            for (key, set) in &merged {
                ps.catalog.restrict_to_set(&mut scratch.mask, key, set);
                offerings_changed |= ps.catalog.affects_offerings(key);
            }
            for (key, allowed) in &scratch.narrowed[..scratch.narrowed_len] {
                let key_name = topology.key_name(*key);
                if is_own_host(bin, self.hostname_key, *key, allowed)
                    || same_values(bin.requirements.set_of(key_name), topology, *key, allowed)
                {
                    continue;
                }
                let names = allowed.iter().map(|&d| topology.domain_name(*key, d));
                ps.catalog.restrict_to_values(
                    &mut scratch.mask,
                    key_name,
                    names,
                    &mut scratch.values,
                );
                offerings_changed |= ps.catalog.affects_offerings(key_name);
            }
            if scratch.mask.is_empty() {
                bail!(
                    want,
                    "no instance type of nodepool {} is compatible with {}",
                    ps.view.name,
                    describe_narrowing(
                        &merged,
                        topology,
                        &scratch.narrowed[..scratch.narrowed_len]
                    )
                );
            }
            if offerings_changed {
                let narrowed = &scratch.narrowed[..scratch.narrowed_len];
                let allows = |key: &str, value: &str| -> bool {
                    if let Some(k) = topology.key_index(key)
                        && let Some((_, allowed)) = narrowed.iter().find(|(nk, _)| *nk == k)
                    {
                        return topology
                            .domain(k, value)
                            .is_some_and(|d| allowed.binary_search(&d).is_ok());
                    }
                    merged_set(key)
                        .or_else(|| bin.requirements.set_of(key))
                        .is_none_or(|s| s.contains(value))
                };
                let pod_reqs = &st.requirements;
                let bin_reqs = &bin.requirements;
                ps.catalog.restrict_to_offerings(
                    &mut scratch.mask,
                    ps.view,
                    |z| allows(ZONE, z),
                    |c| allows(CAPACITY_TYPE, c),
                    |reqs| bin_reqs.intersects(reqs).is_ok() && pod_reqs.intersects(reqs).is_ok(),
                );
                if scratch.mask.is_empty() {
                    bail!(
                        want,
                        "no instance type of nodepool {} has an available offering the pod's constraints allow",
                        ps.view.name
                    );
                }
            }
            if !pod.csi_volumes.is_empty() {
                let refused = ps.catalog.restrict_to_volumes(
                    &mut scratch.mask,
                    ps.view,
                    &bin.volumes,
                    &pod.csi_volumes,
                );
                if scratch.mask.is_empty() {
                    let (driver, limit) = refused.unwrap_or_default();
                    bail!(
                        want,
                        "would exceed the volume limit of {driver} ({limit}) for every instance type of nodepool {}",
                        ps.view.name
                    );
                }
            }
            if !pod.devices.claims.is_empty() {
                let refused = ps.catalog.restrict_to_devices(
                    &mut scratch.mask,
                    ps.view,
                    &bin.claims,
                    &pod.devices.claims,
                );
                if scratch.mask.is_empty() {
                    bail!(
                        want,
                        "no instance type of nodepool {} carries the devices its ResourceClaims ask for: {}",
                        ps.view.name,
                        refused.unwrap_or_else(|| "no type has devices".to_owned())
                    );
                }
            }
            let before_fit = if want {
                Some(scratch.mask.clone())
            } else {
                None
            };
            let max_alloc = ps.catalog.restrict_to_fit(&mut scratch.mask, &requests);
            if scratch.mask.is_empty() {
                let candidates = before_fit.unwrap_or_default();
                bail!(want, "{}", self.no_fit_reason(pool, &candidates, pod));
            }
            for r in bin.requirements.iter() {
                if let Some(min) = r.min_values() {
                    let min = min as usize;
                    let have = ps.catalog.distinct_values(&scratch.mask, r.key(), min);
                    // BestEffort opens the claim anyway; its minValues is lowered at the end.
                    if have < min && self.input.options.min_values_policy == MinValuesPolicy::Strict
                    {
                        bail!(
                            want,
                            "minValues {min} for {} not met: only {have} value(s) remain",
                            r.key()
                        );
                    }
                }
            }
            // Limits: the claim's floor must stay among its types, or move to one that fits the
            // room the other claims leave.
            if let Some(room) = ps.room.as_ref()
                && floor.is_none_or(|f| !scratch.mask.contains(f))
            {
                let mut room = room.clone();
                if let Some(f) = *floor {
                    room.release(&ps.view.instance_types[ps.catalog.types[f]].capacity);
                }
                match ps.catalog.smallest_within(ps.view, &scratch.mask, &room) {
                    Some(t) => {
                        room.consume(&ps.view.instance_types[ps.catalog.types[t]].capacity);
                        new_floor = Some((t, room));
                    }
                    None => {
                        let any = scratch.mask.iter().next().unwrap_or_default();
                        let capacity = &ps.view.instance_types[ps.catalog.types[any]].capacity;
                        bail!(
                            want,
                            "nodepool {} limit {} exceeded",
                            ps.view.name,
                            room.exceeded_by(capacity).unwrap_or("resource")
                        );
                    }
                }
            }
            new_max_alloc = Some(max_alloc);
        }

        // Commit.
        let topology = &self.topology;
        let mut relisted = std::mem::take(&mut self.scratch.relisted);
        relisted.clear();
        relisted.extend(self.index.tracked_keys().filter(|&k| {
            let name = topology.key_name(k);
            merged.iter().any(|(m, _)| *m == name)
                || self.scratch.narrowed[..self.scratch.narrowed_len]
                    .iter()
                    .any(|(n, _)| *n == k)
        }));
        let merged: Vec<(String, ValueSet)> =
            merged.into_iter().map(|(k, s)| (k.to_owned(), s)).collect();
        let mut room_changed = None;
        let bin = &mut self.bins[b];
        bin.key_domains.clear();
        bin.requests = requests;
        for (key, set) in merged {
            bin.requirements.set(&key, set);
        }
        for (key, allowed) in &self.scratch.narrowed[..self.scratch.narrowed_len] {
            if is_own_host(bin, self.hostname_key, *key, allowed) {
                continue;
            }
            let key_name = self.topology.key_name(*key);
            if !same_values(
                bin.requirements.set_of(key_name),
                &self.topology,
                *key,
                allowed,
            ) {
                let set =
                    ValueSet::in_(allowed.iter().map(|&d| self.topology.domain_name(*key, d)));
                bin.requirements.set(key_name, set);
            }
        }
        if let (
            Capacity::Types {
                mask,
                max_alloc,
                floor,
            },
            Some(new_max),
        ) = (&mut bin.capacity, new_max_alloc)
        {
            mask.copy_from(&self.scratch.mask);
            *max_alloc = new_max;
            if let (Some((t, room)), BinKind::New { pool }) = (new_floor, bin.kind) {
                *floor = Some(t);
                room_changed = Some((pool, room));
            }
        }
        if let Some((pool, room)) = room_changed {
            self.set_room(pool, room);
            self.share_spend_room(pool);
        }
        let bin = &mut self.bins[b];
        bin.pods.push(p);
        bin.host_ports.extend(pod.host_ports.iter().cloned());
        // Existing nodes with limits, and new claims (their types' limits).
        if bin.volume_limits.is_some() || matches!(bin.kind, BinKind::New { .. }) {
            bin.volumes.extend(pod.csi_volumes.iter().cloned());
        }
        let added: Vec<_> = devices::new_claims(&bin.claims, &pod.devices.claims)
            .cloned()
            .collect();
        bin.claims.extend(added);
        if let BinKind::New { .. } = bin.kind {
            self.index.grew(b, bin.pods.len());
        }
        for &key in &relisted {
            let listed = self.listed(b, key);
            self.index.update_listed(b, key, listed);
        }
        self.scratch.relisted = relisted;
        let bin = &self.bins[b];
        let st = &self.pods[p];
        let open = bin.open_labels;
        let well_known = &self.well_known;
        let allow = |k: &str| open && well_known.contains(k);
        for (&g, inverse) in st
            .selected_by
            .iter()
            .map(|g| (g, false))
            .chain(st.inverse_owned.iter().map(|g| (g, true)))
        {
            if !inverse
                && !self
                    .topology
                    .node_counts(g, &bin.requirements, bin.taints, &allow)
            {
                continue;
            }
            let key = self.topology.group_key(g);
            match bin.host_domain {
                Some(d) if Some(key) == self.hostname_key => self.topology.record(g, d),
                _ => {
                    let set = bin.requirements.set_of(self.topology.key_name(key));
                    self.topology.record_set(g, set, inverse);
                }
            }
        }
        self.sync_occupied();
        Ok(())
    }

    /// After `pools[pool]`'s room changed: the other pools of its spend group get the same
    /// [`PROVIDER_PRICE`] room (one budget for all of them), and their catalogs' limits again.
    pub(super) fn share_spend_room(&mut self, pool: usize) {
        let view: &'a NodePoolView = self.pools[pool].view;
        let Some((group, left)) = super::spend_room(view, self.pools[pool].room.as_ref()) else {
            return;
        };
        for other in 0..self.pools.len() {
            let ps = &self.pools[other];
            if other == pool || ps.view.spend_group.as_deref() != Some(group) {
                continue;
            }
            let Some(mut room) = ps.room.clone() else {
                continue;
            };
            room.0.insert(PROVIDER_PRICE.to_owned(), left);
            self.set_room(other, room);
        }
    }

    /// Sets `pools[pool]`'s room and its catalog's limits to it; a catalog whose types within
    /// the limits changed makes the reach stale.
    fn set_room(&mut self, pool: usize, room: ResourceLimits) {
        let ps = &mut self.pools[pool];
        let before = ps.catalog.within_limits.clone();
        ps.catalog.apply_limits(ps.view, Some(&room));
        ps.room = Some(room);
        self.reach_stale |= ps.catalog.within_limits != before;
    }

    /// "no instance type satisfies cpu=64, memory=1Ti with nodepool default (largest: ...)".
    pub(super) fn no_fit_reason(&self, pool: usize, candidates: &BitSet, pod: &Pod) -> String {
        let ps = &self.pools[pool];
        let largest = ps.catalog.largest(candidates).map_or_else(
            || "none".to_owned(),
            |t| {
                let it = &ps.view.instance_types[ps.catalog.types[t]];
                format!("{} with allocatable {}", it.name, ps.catalog.alloc[t])
            },
        );
        let daemon = ps
            .catalog
            .largest(candidates)
            .map(|t| &ps.catalog.daemon[t])
            .filter(|d| **d != Resources::default())
            .map(|d| format!(", daemonset overhead {d}"))
            .unwrap_or_default();
        format!(
            "no instance type satisfies {} with nodepool {} (largest: {largest}{daemon})",
            pod.requests, ps.view.name
        )
    }
}

/// Whether `allowed` is just bin's own hostname.
pub(super) fn is_own_host(
    bin: &Bin<'_>,
    hostname_key: Option<usize>,
    key: usize,
    allowed: &[DomainId],
) -> bool {
    matches!((hostname_key, bin.host_domain, allowed), (Some(h), Some(d), [a]) if h == key && *a == d)
}

/// Whether `set` is exactly the domains `allowed` of topology key `key`.
pub(super) fn same_values(
    set: Option<&ValueSet>,
    topology: &Topology,
    key: usize,
    allowed: &[DomainId],
) -> bool {
    set.is_some_and(|s| {
        !s.is_complement()
            && s.values().len() == allowed.len()
            && allowed
                .iter()
                .all(|&d| s.contains(topology.domain_name(key, d)))
    })
}

pub(super) fn describe_narrowing(
    merged: &[(&str, ValueSet)],
    topology: &Topology,
    narrowed: &[(usize, Vec<DomainId>)],
) -> String {
    let mut parts: Vec<String> = merged.iter().map(|(k, s)| format!("{k} {s}")).collect();
    for (key, allowed) in narrowed {
        let set = ValueSet::in_(allowed.iter().map(|&d| topology.domain_name(*key, d)));
        parts.push(format!("{} {set}", topology.key_name(*key)));
    }
    if parts.is_empty() {
        "the pod's requirements".to_owned()
    } else {
        parts.join(", ")
    }
}

pub(super) fn topology_reason(topology: &Topology, g: GroupId) -> String {
    let spec = topology.spec(g);
    match spec.kind {
        GroupKind::Spread => format!(
            "topology spread constraint on {} (maxSkew {}) cannot be met",
            spec.key, spec.max_skew
        ),
        GroupKind::Affinity => format!(
            "pod affinity on {}: no allowed domain has a matching pod",
            spec.key
        ),
        GroupKind::AntiAffinity if spec.inverse => format!(
            "pod anti-affinity of running or placed pods on {}: every allowed domain has one",
            spec.key
        ),
        GroupKind::AntiAffinity => format!(
            "pod anti-affinity on {}: every allowed domain already has a matching pod",
            spec.key
        ),
    }
}
