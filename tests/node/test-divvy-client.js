// SPDX-License-Identifier: MIT
// The real divvy Node.js client (@button/divvy-client) against divvyd.
// Started by tests/integration/test_node.py with DIVVYD_HOST and DIVVYD_PORT set, a daemon
// serving tests/data/itest.ini. Prints one line per check, then
// "N passed, N failed"; exits 1 on any failure.
'use strict';

const assert = require('assert');
const DivvyClient = require('@button/divvy-client');

const host = process.env.DIVVYD_HOST || '127.0.0.1';
const port = parseInt(process.env.DIVVYD_PORT, 10);
const actor = `node-${process.pid}`;

let passed = 0;
let failed = 0;

async function check(name, fn) {
  try {
    await fn();
    passed++;
    console.log(`ok - ${name}`);
  } catch (err) {
    failed++;
    console.log(`FAIL - ${name}: ${err && err.stack ? err.stack : err}`);
  }
}

function assertReset(got, lo, hi) {
  assert.ok(got >= lo && got <= hi, `nextResetSeconds ${got} not in [${lo}, ${hi}]`);
}

// Monotonic seconds: a window first hit at t0 counts its reset down by at most the whole
// seconds elapsed since then plus one (rounding) -- bounds from measured time, not a fixed slack.
function now() {
  return Number(process.hrtime.bigint()) / 1e9;
}
function resetLow(reset, t0) {
  return reset - (Math.floor(now() - t0) + 1);
}

async function main() {
  if (!port) {
    throw new Error('DIVVYD_PORT is not set');
  }
  // A short command timeout: every wait of this test is bounded.
  const client = new DivvyClient(host, port, { defaultCommandTimeoutMillis: 10000, autoReconnect: false });
  client.on('error', (err) => console.log(`client error: ${err.message}`));

  if (process.env.DIVVYD_RULES === 'verbs') {
    await verbsChecks(client);
    client.close();
    return;
  }

  await check('counts down one counter (quoted keys and values on the wire)', async () => {
    const t0 = now();
    for (let i = 0; i < 12; i++) {
      const r = await client.hit({ path: '/probe', user: actor });
      if (i < 10) {
        assert.strictEqual(r.isAllowed, true, `hit ${i + 1}: ${JSON.stringify(r)}`);
        assert.strictEqual(r.currentCredit, 9 - i, `hit ${i + 1}: ${JSON.stringify(r)}`);
      } else {
        assert.strictEqual(r.isAllowed, false, `hit ${i + 1}: ${JSON.stringify(r)}`);
        assert.strictEqual(r.currentCredit, 0, `hit ${i + 1}: ${JSON.stringify(r)}`);
      }
      if (i === 0) {
        assert.strictEqual(r.nextResetSeconds, 3600);
      } else {
        assertReset(r.nextResetSeconds, resetLow(3600, t0), 3600);
      }
    }
  });

  await check('another actor gets fresh quota', async () => {
    const r = await client.hit({ path: '/probe', user: `${actor}-2` });
    assert.deepStrictEqual(r, { isAllowed: true, currentCredit: 9, nextResetSeconds: 3600 });
  });

  await check('always allow', async () => {
    const r = await client.hit({ path: '/open' });
    assert.deepStrictEqual(r, { isAllowed: true, currentCredit: 5, nextResetSeconds: 0 });
  });

  await check('default deny, also for an empty operation', async () => {
    assert.deepStrictEqual(await client.hit({ method: 'DELETE', path: '/index.html' }),
      { isAllowed: false, currentCredit: 0, nextResetSeconds: -1 });
    assert.deepStrictEqual(await client.hit({}),
      { isAllowed: false, currentCredit: 0, nextResetSeconds: -1 });
  });

  await check('numbers as values, null keys dropped', async () => {
    const r = await client.hit({ path: '/probe', user: 12345, skipped: null });
    assert.strictEqual(r.isAllowed, true);
    assert.ok(r.currentCredit <= 9, JSON.stringify(r));
  });

  await check('90 requests in flight at once come back in order', async () => {
    const user = `${actor}-burst`;
    const promises = [];
    for (let i = 0; i < 90; i++) {
      promises.push(client.hit({ path: '/big', user: user }));
    }
    const results = await Promise.all(promises);
    results.forEach((r, i) => {
      assert.strictEqual(r.isAllowed, true);
      assert.strictEqual(r.currentCredit, 99999 - i, `request ${i}: ${JSON.stringify(r)}`);
    });
  });

  client.close();
}

// Against tests/data/verbs.ini: rules with divvyd's other algorithms and continue rules, which
// an unchanged divvy client reaches through HIT with divvy's reply shape.
async function verbsChecks(client) {
  await check('token bucket through HIT: burst 5, then the retry-after', async () => {
    const t0 = now();
    for (let i = 0; i < 5; i++) {
      const r = await client.hit({ path: '/tb', user: actor });
      assert.strictEqual(r.isAllowed, true, JSON.stringify(r));
      assert.strictEqual(r.currentCredit, 4 - i, JSON.stringify(r));
    }
    const r = await client.hit({ path: '/tb', user: actor });
    assert.strictEqual(r.isAllowed, false, JSON.stringify(r));
    assert.strictEqual(r.currentCredit, 0, JSON.stringify(r));
    assertReset(r.nextResetSeconds, resetLow(360, t0), 360);
  });

  await check('sliding window through HIT', async () => {
    const r = await client.hit({ path: '/sw', user: actor });
    assert.strictEqual(r.isAllowed, true, JSON.stringify(r));
    assert.strictEqual(r.currentCredit, 9, JSON.stringify(r));
  });

  await check('continue and stop rules: both must allow', async () => {
    const path = `/multi/${actor}`;
    for (let i = 0; i < 3; i++) {
      const r = await client.hit({ path: path, user: actor });
      assert.strictEqual(r.isAllowed, true, JSON.stringify(r));
      assert.strictEqual(r.currentCredit, 2 - i, JSON.stringify(r));
    }
    const r = await client.hit({ path: path, user: actor });
    assert.strictEqual(r.isAllowed, false, JSON.stringify(r));
    const other = await client.hit({ path: path, user: `${actor}-2` });
    assert.deepStrictEqual([other.isAllowed, other.currentCredit], [true, 1]);
  });

  await check('an always-deny continue rule', async () => {
    assert.deepStrictEqual(await client.hit({ path: '/never', user: actor }),
      { isAllowed: false, currentCredit: 0, nextResetSeconds: -1 });
  });
}

main().then(() => {
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}, (err) => {
  console.log(`FAIL - ${err && err.stack ? err.stack : err}`);
  console.log(`${passed} passed, ${failed + 1} failed`);
  process.exit(1);
});
