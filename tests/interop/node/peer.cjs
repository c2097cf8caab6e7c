// SPDX-License-Identifier: BSD-3-Clause
// node-redlock as a peer of rlock's token layout (tests/interop/
// interop_test.sh): RUNS times, take the lock "counter" with the library's
// own retries, run the critical section, release.
//   node peer.cjs v5|v4 SOCKET DIR ID RUNS
'use strict';
const { execFileSync } = require('child_process');
const Redis = require('ioredis');

const [version, sock, dir, id, runs] = process.argv.slice(2);
const client = new Redis({ path: sock, lazyConnect: false });
// Retry every 10 to 20 ms for about a minute: waiting is by retries only.
const settings = { retryCount: 4000, retryDelay: 10, retryJitter: 10 };

async function main() {
  let take, give;
  if (version === 'v5') {
    const Redlock = require('redlock').default;
    const redlock = new Redlock([client], settings);
    take = () => redlock.acquire(['counter'], 10000);
    give = (lock) => lock.release();
  } else if (version === 'v4') {
    const Redlock = require('redlock4');
    const redlock = new Redlock([client], settings);
    take = () => redlock.lock('counter', 10000);
    give = (lock) => lock.unlock();
  } else {
    throw new Error('version must be v5 or v4');
  }
  for (let i = 0; i < Number(runs); i++) {
    const lock = await take();
    execFileSync(dir + '/section.sh', [dir, id], { stdio: 'inherit' });
    await give(lock);
  }
}

main().then(
  () => client.quit(),
  (e) => {
    console.error('node-redlock ' + version + ': ' + e.message);
    process.exit(1);
  });
