//! Turning an open bin into a NodeClaim: its instance types cut to its pool's limits and
//! `minValues` (relaxed under `BestEffort`), and the offerings it may launch with.

use super::*;

impl<'a> Solver<'a> {
    /// The NodeClaim for new bin `b`, or why it cannot be launched. In a pool with limits its
    /// types are cut to those no larger than its floor; when that leaves too few for a
    /// `minValues`, the pool's `slack` (what the limits leave once every claim holds its floor)
    /// pays for larger ones.
    pub(super) fn finalize(
        &self,
        b: usize,
        slack: &mut [Option<ResourceLimits>],
    ) -> Result<NewClaim, String> {
        const NO_OFFERING: &str = "no available offering is compatible with the pod's constraints";
        let bin = &self.bins[b];
        let (BinKind::New { pool }, Capacity::Types { mask, floor, .. }) =
            (bin.kind, &bin.capacity)
        else {
            return Err(NO_OFFERING.to_owned());
        };
        let ps = &self.pools[pool];
        let mut requirements = bin.requirements.clone();
        requirements.remove(HOSTNAME);
        let min_values_met = |mask: &BitSet| {
            requirements.iter().all(|r| {
                r.min_values().is_none_or(|min| {
                    let min = min as usize;
                    ps.catalog.distinct_values(mask, r.key(), min) >= min
                })
            })
        };
        let mut mask = mask.clone();
        if let (Some(room), Some(f), Some(slack)) = (&ps.room, *floor, slack.get_mut(pool)) {
            let mut tight = mask.clone();
            ps.catalog.restrict_to_floor(ps.view, &mut tight, f, room);
            if min_values_met(&tight) {
                mask = tight;
            } else {
                // Add the smallest of the types the slack pays for until minValues is met.
                let mut wide = slack.clone().unwrap_or_else(|| room.clone());
                wide.release(&ps.view.instance_types[ps.catalog.types[f]].capacity);
                let scale = ps.view.limits.as_ref().unwrap_or(room);
                let capacity = |t: usize| &ps.view.instance_types[ps.catalog.types[t]].capacity;
                let mut candidates: Vec<(f64, usize)> = mask
                    .iter()
                    .filter(|&t| !tight.contains(t) && wide.exceeded_by(capacity(t)).is_none())
                    .map(|t| (scale.share(capacity(t)), t))
                    .collect();
                candidates.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                let mut largest = Resources::default();
                for t in tight.iter() {
                    largest.max_assign(capacity(t));
                }
                for (_, t) in candidates {
                    if min_values_met(&tight) {
                        break;
                    }
                    tight.insert(t);
                    largest.max_assign(capacity(t));
                }
                mask = tight;
                if !min_values_met(&mask) {
                    return Err(format!(
                        "nodepool {} limit leaves too few instance types for minValues",
                        ps.view.name
                    ));
                }
                wide.consume(&largest);
                *slack = Some(wide);
            }
        }
        let pricer = ps.catalog.pricer(ps.view, &requirements);
        let mut priced: Vec<(f64, &str, usize, usize)> = mask
            .iter()
            .filter_map(|t| {
                let (price, offering) = pricer.cheapest(t)?;
                Some((
                    price,
                    ps.view.instance_types[ps.catalog.types[t]].name.as_str(),
                    t,
                    offering,
                ))
            })
            .collect();
        priced.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1)));
        // The provider launches the cheapest of the claim's types by its own prices: where
        // NodeOverlays re-priced some, the types it would launch before the host's cheapest go
        // last, taken only when minValues needs them (no launch that consolidation replaces).
        let agreeing = if ps.catalog.repriced {
            let provider_price =
                |&(price, _, t, _): &(f64, &str, usize, usize)| pricer.listed(t).unwrap_or(price);
            agreeing_first(&mut priced, |e| e.0, provider_price)
        } else {
            priced.len()
        };
        drop(pricer);
        let &(cheapest_price, _, cheapest_t, cheapest_o) =
            priced.first().ok_or_else(|| NO_OFFERING.to_owned())?;

        let limit = self.input.options.max_instance_types.max(1);
        let mut chosen: Vec<usize> = (0..agreeing.min(limit)).collect();
        // Keep minValues satisfiable after truncation: add the cheapest types that bring values.
        for r in requirements.iter() {
            let Some(min) = r.min_values() else { continue };
            let values_of = |i: usize| -> Vec<String> {
                let it = &ps.view.instance_types[ps.catalog.types[priced[i].2]];
                it.requirements
                    .set_of(r.key())
                    .map(|s| s.values().to_vec())
                    .unwrap_or_default()
            };
            let mut seen: BTreeSet<String> = chosen.iter().flat_map(|&i| values_of(i)).collect();
            let mut next = chosen.len();
            while seen.len() < min as usize && next < priced.len() {
                let values = values_of(next);
                if values.iter().any(|v| !seen.contains(v)) {
                    seen.extend(values);
                    chosen.push(next);
                }
                next += 1;
            }
        }
        chosen.sort_unstable();
        if self.input.options.min_values_policy == MinValuesPolicy::BestEffort {
            relax_min_values(&mut requirements, &chosen, |i, key| {
                ps.view.instance_types[ps.catalog.types[priced[i].2]]
                    .requirements
                    .set_of(key)
                    .map(|s| s.values().to_vec())
                    .unwrap_or_default()
            });
        }
        let options: Vec<String> = chosen.iter().map(|&i| priced[i].1.to_owned()).collect();
        // The same names in name order, which is the set's own order: building it is a copy.
        let mut by_name: Vec<usize> = chosen.iter().map(|&i| priced[i].2).collect();
        by_name.sort_unstable_by_key(|&t| ps.catalog.name_rank[t]);
        let names = ValueSet::in_(
            by_name
                .iter()
                .map(|&t| ps.view.instance_types[ps.catalog.types[t]].name.as_str()),
        );
        let narrowed = match requirements.set_of(INSTANCE_TYPE) {
            Some(existing) => existing.intersection(&names),
            None => names,
        };
        requirements.set(INSTANCE_TYPE, narrowed);

        let it = &ps.view.instance_types[ps.catalog.types[cheapest_t]];
        let offering = &it.offerings[cheapest_o];
        Ok(NewClaim {
            node_pool: ps.view.name.clone(),
            requirements,
            requests: bin.requests.plus(&ps.catalog.daemon[cheapest_t]),
            instance_type_options: options,
            cheapest_price,
            cheapest_offering: ChosenOffering {
                instance_type: it.name.clone(),
                zone: offering.zone.clone(),
                capacity_type: offering.capacity_type.clone(),
                price: offering.price,
            },
            pods: bin.pods.clone(),
        })
    }
}

/// Reorders `priced` (in the host's price order, `host`) so that the types a provider would
/// launch before the first one, going by its own prices (`provider`), come last: those it lists
/// below the first, or at the first's price while the host prices them higher. Returns how many
/// come first (all when the provider agrees, as without overlays). Each part keeps its order.
fn agreeing_first<E>(
    priced: &mut Vec<E>,
    host: impl Fn(&E) -> f64,
    provider: impl Fn(&E) -> f64,
) -> usize {
    let Some(first) = priced.first() else {
        return 0;
    };
    let (host_first, provider_first) = (host(first), provider(first));
    let (agree, undercut): (Vec<E>, Vec<E>) = priced.drain(1..).partition(|e| {
        let listed = provider(e);
        listed > provider_first || (listed == provider_first && host(e) <= host_first)
    });
    let agreeing = 1 + agree.len();
    priced.extend(agree);
    priced.extend(undercut);
    agreeing
}

/// Lowers each `minValues` of `requirements` that the instance types `chosen` cannot meet to the
/// number of distinct values they have (`values_of(i, key)`: type `i`'s values of `key`), as
/// Karpenter's `BestEffort` policy records on the claim what it could keep.
pub(super) fn relax_min_values(
    requirements: &mut Requirements,
    chosen: &[usize],
    values_of: impl Fn(usize, &str) -> Vec<String>,
) {
    let short: Vec<(String, u32)> = requirements
        .iter()
        .filter_map(|r| {
            let min = r.min_values()?;
            let have: BTreeSet<String> =
                chosen.iter().flat_map(|&i| values_of(i, r.key())).collect();
            let have = u32::try_from(have.len()).unwrap_or(u32::MAX);
            (have < min).then(|| (r.key().to_owned(), have.max(1)))
        })
        .collect();
    for (key, have) in short {
        if let Some(r) = requirements.remove(&key) {
            requirements.add(r.with_min_values(Some(have)));
        }
    }
}
