import { readFile } from 'node:fs/promises';
import { cli, io } from '@bytecodealliance/preview2-shim';
import assert from 'node:assert/strict';

// Guest smoke test: the transpiled components (see run.sh) called through their real WIT exports,
// with `capstan:provider/kube` and `capstan:provider/host` implemented here as a fake.
const OUT = process.argv[2] ?? './out';

const wasi = {
  'wasi:cli/environment': cli.environment, 'wasi:cli/exit': cli.exit,
  'wasi:cli/stderr': cli.stderr, 'wasi:cli/stdin': cli.stdin, 'wasi:cli/stdout': cli.stdout,
  'wasi:cli/terminal-input': cli.terminalInput, 'wasi:cli/terminal-output': cli.terminalOutput,
  'wasi:cli/terminal-stderr': cli.terminalStderr, 'wasi:cli/terminal-stdin': cli.terminalStdin,
  'wasi:cli/terminal-stdout': cli.terminalStdout,
  'wasi:io/error': io.error, 'wasi:io/poll': io.poll, 'wasi:io/streams': io.streams,
};

// A fake API server for Nodes, plus a log of every call.
const calls = [];
const nodes = new Map();
const cache = new Map();
let clock = 1_700_000_000_000;
let denyAll = false;
const err = (tag, val) => { throw { payload: { tag, val } }; };
const kube = {
  get(o) {
    calls.push(['get', o.target.kind, o.name, o.subresource]);
    if (denyAll) err('permission-denied', 'nope');
    if (o.target.kind !== 'Node') err('not-found', `${o.target.kind} ${o.name}`);
    const n = nodes.get(o.name); if (!n) err('not-found', `nodes "${o.name}" not found`);
    return JSON.stringify(n);
  },
  list(t, opts) {
    calls.push(['list', t.kind, opts.labelSelector]);
    const [k, v] = (opts.labelSelector ?? '=').split('=');
    const items = [...nodes.values()].filter(n => !k || n.metadata.labels?.[k] === v);
    return JSON.stringify({ apiVersion: 'v1', kind: 'NodeList', items });
  },
  create(t, body) {
    calls.push(['create', t.kind, t.cluster, t.apiVersion, t.namespace]);
    if (denyAll) err('permission-denied', 'create nodes');
    const n = JSON.parse(body);
    if (nodes.has(n.metadata.name)) err('conflict', 'exists');
    n.metadata.uid = 'uid-' + n.metadata.name; n.metadata.creationTimestamp = '2024-11-25T23:21:05Z';
    nodes.set(n.metadata.name, n); return JSON.stringify(n);
  },
  patch(o, type, body, fm) { calls.push(['patch', o.name, o.subresource, type, fm]); err('permission-denied', 'no patch'); },
  delete(o) {
    calls.push(['delete', o.target.kind, o.name]);
    if (!nodes.delete(o.name)) err('not-found', `nodes "${o.name}" not found`);
  },
};
const logs = [];
const host = {
  log(level, message) { logs.push([level, message]); },
  sleep(ms) { clock += Number(ms); calls.push(['sleep', Number(ms)]); },
  now() { return BigInt(clock); },
  cacheGet(k) { return cache.get(k); },
  cacheSet(k, v, ttl) { cache.set(k, v); },
  cacheDelete(k) { cache.delete(k); },
};

async function load(name) {
  const mod = await import(`${OUT}/${name}/${name}.js`);
  const getCoreModule = async (p) => WebAssembly.compile(await readFile(`${OUT}/${name}/${p}`));
  const inst = await mod.instantiate(getCoreModule, { ...wasi, 'capstan:provider/kube': kube, 'capstan:provider/host': host });
  return inst.cloudProvider ?? inst['capstan:provider/cloud-provider@0.1.0'] ?? inst;
}
const providerError = (fn) => { try { fn(); } catch (e) { return e.payload ?? e; } assert.fail('expected an error'); };

const pool = { name: 'default', requirements: [], labels: [], taints: [], startupTaints: [] };
const cls = (p) => ({ name: 'default', parameters: JSON.stringify(p) });

// ---- kwok ----
const kwok = await load('kwok');
assert.equal(kwok.name(), 'kwok');
const its = kwok.getInstanceTypes(pool, cls({}));
assert.equal(its.instanceTypes.length, 72);
console.log('kwok: types', its.instanceTypes.length, 'first', its.strings[its.instanceTypes[0].name],
  its.offerings[its.instanceTypes[0].offerings.start]);
let e = providerError(() => kwok.validateNodeClass(cls({ maxCpu: -1 })));
assert.equal(e.tag, 'invalid'); console.log('kwok: validate maxCpu -1 ->', e);
e = providerError(() => kwok.validateNodeClass({ name: 'x', parameters: '[1]' }));
assert.equal(e.tag, 'invalid');
e = providerError(() => kwok.validateNodeClass(cls({ zones: ['mars'] })));
assert.equal(e.tag, 'invalid'); console.log('kwok: empty catalog ->', e.val);
kwok.validateNodeClass(cls({ families: ['c'] }));

const claim = {
  name: 'default-x7k2p', nodePoolName: 'default',
  labels: [{ key: 'karpenter.sh/nodepool', value: 'default' }], annotations: [],
  taints: [], startupTaints: [{ key: 'example.com/init', value: undefined, effect: 'no-execute' }],
  requirements: [{ key: 'karpenter.sh/capacity-type', operator: 'in', values: ['on-demand'], minValues: undefined },
                 { key: 'kubernetes.io/arch', operator: 'in', values: ['arm64'], minValues: undefined }],
  requests: [{ name: 'cpu', quantity: '1500m' }, { name: 'memory', quantity: '2Gi' }, { name: 'pods', quantity: '3' }],
  providerId: undefined, imageId: undefined, nodeName: undefined, capacity: [], allocatable: [], createdAt: undefined,
};
const params = { imageID: 'img-1', launchDelayMillis: 250 };
const out = kwok.create(claim, cls(params));
console.log('kwok: created', out.providerId, out.imageId, out.createdAt, out.capacity, out.allocatable);
const label = (c, k) => c.labels.find(l => l.key === k)?.value;
assert.equal(out.providerId, 'kwok://default-x7k2p');
assert.equal(label(out, 'node.kubernetes.io/instance-type'), 'c-2x-arm64-linux');
assert.equal(label(out, 'karpenter.sh/capacity-type'), 'on-demand');
assert.equal(out.imageId, 'img-1');
assert.ok(calls.some(c => c[0] === 'sleep' && c[1] === 250));
const node = nodes.get('default-x7k2p');
assert.equal(node.metadata.annotations['kwok.x-k8s.io/node'], 'fake');
assert.deepEqual(node.spec.taints.map(t => t.key), ['karpenter.sh/unregistered', 'example.com/init']);
const creates = () => calls.filter(c => c[0] === 'create').length;
assert.equal(creates(), 1);
const again = kwok.create(claim, cls(params));
assert.equal(again.providerId, out.providerId); assert.equal(creates(), 1, 'idempotent');
const got = kwok.get('kwok://default-x7k2p');
assert.equal(got.nodeName, 'default-x7k2p');
assert.equal(providerError(() => kwok.get('kwok://nope')).tag, 'not-found');
assert.equal(providerError(() => kwok.get('aws:///i-1')).tag, 'not-found');
assert.equal(kwok.list().length, 1);
assert.equal(kwok.isDrifted(out, cls(params)), undefined);
assert.equal(kwok.isDrifted(out, cls({ ...params, imageID: 'img-2' })), 'ImageDrifted');
assert.equal(kwok.isDrifted(out, cls({ ...params, families: ['c'] })), 'NodeClassDrifted');
assert.equal(kwok.isDrifted({ ...got, annotations: [] }, cls({ ...params, imageID: 'img-2' })), 'ImageDrifted');
assert.equal(kwok.isDrifted(out, cls({ ...params, launchDelayMillis: 1 })), undefined);
console.log('kwok: repair', kwok.repairPolicies());
kwok.delete(out);
assert.equal(providerError(() => kwok.delete(out)).tag, 'not-found');
e = providerError(() => kwok.create({ ...claim, name: 'ice' }, cls({ unavailableOfferings: [{}] })));
assert.equal(e.tag, 'insufficient-capacity'); console.log('kwok: ICE ->', e.val);
e = providerError(() => kwok.create({ ...claim, name: 'big', requests: [{ name: 'cpu', quantity: '1000' }] }, cls({})));
assert.equal(e.tag, 'insufficient-capacity');
denyAll = true;
e = providerError(() => kwok.create({ ...claim, name: 'denied' }, cls({})));
assert.equal(e.tag, 'create-failed'); console.log('kwok: denied ->', e.val);
denyAll = false;
console.log('kwok: logs', logs);

// ---- chaos ----
const chaos = await load('chaos');
assert.equal(chaos.name(), 'chaos');
assert.equal(chaos.getInstanceTypes(pool, cls({ mode: 'catalog', count: 1000 })).instanceTypes.length, 1000);
const echo = chaos.getInstanceTypes({ ...pool, name: 'pool-xyz' }, cls({}));
assert.equal(echo.strings[echo.instanceTypes[0].name], 'pool-xyz');
assert.equal(chaos.getInstanceTypes(pool, cls({ mode: 'grow', bytes: 8 << 20 })).instanceTypes.length, 1);
assert.equal(chaos.getInstanceTypes(pool, cls({ mode: 'sleep', millis: 7 })).instanceTypes.length, 1);
e = providerError(() => chaos.validateNodeClass(cls({ mode: 'kube', op: 'get', kind: 'Secret', namespace: 'kube-system', name: 'x' })));
assert.equal(e.tag, 'invalid'); assert.equal(e.val, 'not-found: Secret x');
e = providerError(() => chaos.validateNodeClass(cls({ mode: 'kube', op: 'patch', kind: 'Node', name: 'n', subresource: 'status', patchType: 'apply', body: {} })));
assert.equal(e.val, 'permission-denied: no patch');
console.log('chaos: patch call', calls.at(-1));
chaos.validateNodeClass(cls({ mode: 'kube', op: 'list', kind: 'Node' }));
assert.equal(providerError(() => chaos.validateNodeClass(cls({ mode: 'cache', key: 'k' }))).val, 'cache-miss');
chaos.validateNodeClass(cls({ mode: 'cache', key: 'k', set: 'v', ttlMillis: 100 }));
assert.equal(providerError(() => chaos.validateNodeClass(cls({ mode: 'cache', key: 'k' }))).val, 'cache-hit: v');
assert.equal(providerError(() => chaos.create(claim, cls({}))).tag, 'create-failed');
assert.equal(chaos.create(claim, cls({ mode: 'ok' })).providerId, 'chaos://default-x7k2p');
assert.equal(chaos.list().length, 0);
try { chaos.getInstanceTypes(pool, cls({ mode: 'trap' })); assert.fail('no trap'); }
catch (t) { console.log('chaos: trap ->', String(t).slice(0, 80)); }
console.log('ALL OK');
