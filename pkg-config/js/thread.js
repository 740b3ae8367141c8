// A CPU executor thread of the threaded build (threads.js): instantiates the module over the
// model thread's shared memory and runs the tasks of its parallel loops until the page ends.

import init, { workerDied, workerMain } from './wasm/wick_mt.js';

self.onmessage = async ({ data }) => {
  try {
    await init({ module_or_path: data.module, memory: data.memory });
  } catch (e) {
    self.postMessage({ error: `wick thread: ${e?.message || e}` });
    return;
  }
  self.postMessage('ready');
  try {
    workerMain(); // returns only by throwing: a task trapped
  } catch (e) {
    console.error(`wick thread ${self.name}: ${e?.message || e}`);
    workerDied();
  }
};
