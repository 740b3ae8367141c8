// A Vite app that uses wick-llm as an npm user would (`import ... from 'wick-llm'`): the
// test builds it with `vite build` and runs the bundle, in the worker and on the main thread.
import { Wick } from 'wick-llm';

window.generate = async (url, worker) => {
  const model = await Wick.load(url, { worker, cache: false });
  let text = '';
  for await (const piece of model.generate('Hello', { max_tokens: 6, temperature: 0 })) text += piece;
  const { executor, info } = model;
  await model.unload();
  return { text, executor, threads: info.threads, cores: navigator.hardwareConcurrency };
};
