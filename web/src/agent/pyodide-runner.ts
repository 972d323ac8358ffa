/**
 * Python inside the Python worker (python-worker.ts): Pyodide with pytest's wheels unpacked
 * into its site-packages. Before every run the project's files are written to /repo in
 * Pyodide's file system (files that are gone are removed), the project's modules are dropped
 * from sys.modules, stale bytecode is deleted and import caches are invalidated, so each run
 * sees the current files; afterwards the files the program wrote come back as changes.
 */
import type { PyodideAPI } from 'pyodide';
import type { PythonHost, PythonResult } from './wasm/lilypad_agent_wasm.js';

export type RunRequest = Parameters<PythonHost['run']>[0];
export type { PythonResult };

/** Caches and bytecode are never part of the project. */
const SKIPPED = new Set(['__pycache__', '.pytest_cache', '.git']);

/** Runs one command line inside the interpreter (see runCommand below). */
const DRIVER = String.raw`
import io, importlib, os, runpy, shutil, signal, sys, time, traceback

sys.dont_write_bytecode = True

# In Pyodide a sleep is one busy wait that no interrupt reaches: sleep in short
# slices, asking the host's deadline (_lilypad_expired, set by the runner) between them.
_sleep_slice = time.sleep
def _sleep(secs):
    end = time.monotonic() + max(0.0, float(secs))
    while (left := end - time.monotonic()) > 0:
        if _lilypad_expired():
            raise KeyboardInterrupt
        _sleep_slice(min(left, 0.02))
time.sleep = _sleep
_base_path = list(sys.path)

# The host's deadline arrives as SIGINT (Pyodide's interrupt buffer). A program that catches
# the KeyboardInterrupt and goes on (an except BaseException in a loop) gets it again, then
# at the next line it runs, which is inside its handler, so it leaves the handler.
_interrupts = 0

def _stop_every_line(frame, event, arg):
    # At lines only: raised at an 'exception' event, the exception stays catchable where it
    # was, and the error unsets the trace. (Raised at a line, it unsets it too, but the
    # exception leaves the handler it was raised in; the next interrupt sets the trap again.)
    if event == 'line' and _lilypad_expired():
        raise KeyboardInterrupt
    return _stop_every_line

def _on_interrupt(signum, frame):
    global _interrupts
    _interrupts += 1
    if _interrupts > 1:
        sys.settrace(_stop_every_line)
        while frame is not None:
            frame.f_trace = _stop_every_line
            frame.f_trace_lines = True
            frame = frame.f_back
    raise KeyboardInterrupt

signal.signal(signal.SIGINT, _on_interrupt)

def _lilypad_reset():
    global _interrupts
    _interrupts = 0
    sys.settrace(None)

def _purge(root):
    for name, mod in list(sys.modules.items()):
        f = getattr(mod, '__file__', None) or ''
        if f.startswith(root + '/'):
            del sys.modules[name]
    for dirpath, dirnames, _ in os.walk(root):
        if '__pycache__' in dirnames:
            shutil.rmtree(os.path.join(dirpath, '__pycache__'), ignore_errors=True)
            dirnames.remove('__pycache__')
    importlib.invalidate_caches()

def _exit_code(e):
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)
    return 1

def _lilypad_run(argv, cwd, root, stdin, disarm):
    argv = list(argv)
    _purge(root)
    os.chdir(cwd)
    sys.path[:] = _base_path
    sys.stdin = io.StringIO(stdin)
    prog = os.path.basename(argv[0])
    args = argv[1:]
    try:
        if prog == 'pytest' or prog.startswith('py.test'):
            import pytest
            sys.argv = ['pytest'] + args
            return int(pytest.main(args))
        if prog.startswith('pip'):
            print('pip: installing packages is not available in the browser; the standard library and pytest are.', file=sys.stderr)
            return 1
        # python / python3
        while args and args[0] in ('-u', '-B', '-q', '-I', '-E', '-s'):
            args.pop(0)
        if args and args[0] in ('-V', '--version'):
            print('Python ' + sys.version.split()[0])
            return 0
        if args and args[0] == '-c':
            if len(args) < 2:
                print('Argument expected for the -c option', file=sys.stderr)
                return 2
            sys.argv = ['-c'] + args[2:]
            sys.path.insert(0, '')
            exec(compile(args[1], '<string>', 'exec'), {'__name__': '__main__'})
            return 0
        if args and args[0] == '-m':
            if len(args) < 2:
                print('Argument expected for the -m option', file=sys.stderr)
                return 2
            module, rest = args[1], args[2:]
            sys.path.insert(0, cwd)
            if module == 'pytest':
                import pytest
                sys.argv = ['pytest'] + rest
                return int(pytest.main(rest))
            sys.argv = [module] + rest
            runpy.run_module(module, run_name='__main__', alter_sys=True)
            return 0
        if not args or args[0] == '-':
            sys.argv = [''] + args[1:]
            sys.path.insert(0, '')
            exec(compile(stdin, '<stdin>', 'exec'), {'__name__': '__main__'})
            return 0
        script = args[0]
        if not os.path.exists(script):
            print(f"python3: can't open file '{os.path.abspath(script)}': [Errno 2] No such file or directory", file=sys.stderr)
            return 2
        sys.argv = args
        sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
        runpy.run_path(script, run_name='__main__')
        return 0
    except SystemExit as e:
        return _exit_code(e)
    except KeyboardInterrupt:
        # The host's deadline (the browser has no other way to stop a program).
        disarm()
        print(f'{prog}: stopped at the command\'s time limit', file=sys.stderr)
        return 124
    except BaseException:
        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.chdir('/')
`;

/**
 * Starts Pyodide from `indexURL` (its files are fetched from there), unpacks pytest's wheels
 * (listed in wheels/wheels.json) and installs the driver.
 */
export async function startPyodide(
  indexURL: string,
  loadPyodide: typeof import('pyodide').loadPyodide,
  options: Partial<Parameters<typeof import('pyodide').loadPyodide>[0]> = {},
): Promise<PyodideRunner> {
  const pyodide = await loadPyodide({ indexURL, packages: [], ...options });
  const wheels = (await (await fetch(`${indexURL}wheels/wheels.json`)).json()) as string[];
  const extractDir = pyodide.runPython("import sysconfig; sysconfig.get_path('purelib')") as string;
  for (const name of wheels) {
    const response = await fetch(`${indexURL}wheels/${name}`);
    if (!response.ok) throw new Error(`pyodide: ${name}: HTTP ${response.status}`);
    pyodide.unpackArchive(await response.arrayBuffer(), 'wheel', { extractDir });
  }
  pyodide.runPython(DRIVER);
  return new PyodideRunner(pyodide);
}

/** How often a program that swallowed the interrupt is interrupted again. */
const INTERRUPT_AGAIN_MS = 250;

/**
 * A program's time limit, as Pyodide's interrupt buffer. While Python runs, Pyodide reads the
 * buffer's first element every few dozen bytecodes and raises KeyboardInterrupt when it is 2
 * (SIGINT), then writes 0. This one reads the clock instead of shared memory, so the worker
 * stops `while True: pass` itself and keeps its interpreter: no SharedArrayBuffer, no
 * cross-origin isolation (which editor webviews do not have). What it cannot stop (a long C
 * call, a program that clears the driver's trace) the page stops by terminating the worker.
 */
class Deadline {
  private at = Infinity;
  /** When the next interrupt is due: the limit, then every INTERRUPT_AGAIN_MS after it. */
  private next = Infinity;

  get 0(): number {
    if (performance.now() < this.next) return 0;
    this.next = performance.now() + INTERRUPT_AGAIN_MS;
    return 2;
  }

  set 0(_: number) {
    // Pyodide clears a delivered signal; the clock decides the next one.
  }

  /** The limit has passed (for waits that no interrupt reaches, and the driver's line trap). */
  get expired(): boolean {
    return performance.now() >= this.at;
  }

  arm(ms: number) {
    this.at = this.next = performance.now() + Math.max(0, ms);
  }

  disarm() {
    this.at = this.next = Infinity;
  }
}

export class PyodideRunner {
  private output: PythonResult['output'] = [];
  private deadline = new Deadline();

  constructor(readonly pyodide: PyodideAPI) {
    pyodide.setInterruptBuffer(this.deadline as unknown as Int32Array);
    pyodide.globals.set('_lilypad_expired', () => this.deadline.expired);
    for (const stream of ['stdout', 'stderr'] as const) {
      const decoder = new TextDecoder();
      const write = (bytes: Uint8Array) => {
        const text = decoder.decode(bytes, { stream: true });
        const last = this.output[this.output.length - 1];
        if (last?.stream === stream) last.text += text;
        else if (text) this.output.push({ stream, text });
        return bytes.length;
      };
      if (stream === 'stdout') pyodide.setStdout({ write });
      else pyodide.setStderr({ write });
    }
  }

  /** The Python version string, e.g. "3.14.0". */
  get version(): string {
    return this.pyodide.runPython('import sys; sys.version.split()[0]') as string;
  }

  run(request: RunRequest): PythonResult {
    const { FS } = this.pyodide;
    const root = request.root;
    const before = new Map(request.files);
    syncTree(FS, root, before);
    // Folders without files (`mkdir d && cd d && python3 …`) exist only in the shell's project.
    FS.mkdirTree(request.cwd);
    this.output = [];
    const run = this.pyodide.globals.get('_lilypad_run');
    let exitCode: number;
    if (request.timeout_ms !== undefined) this.deadline.arm(request.timeout_ms);
    try {
      exitCode = run(request.argv, request.cwd, root, new TextDecoder().decode(request.stdin), () => this.deadline.disarm()) as number;
    } catch (e) {
      // Interrupted again while the driver was cleaning up: the program is stopped all the same.
      if (!String((e as Error)?.message ?? e).includes('KeyboardInterrupt')) throw e;
      this.output.push({ stream: 'stderr', text: `${request.argv[0]}: stopped at the command's time limit\n` });
      exitCode = 124;
    } finally {
      this.deadline.disarm();
      run.destroy();
      this.pyodide.runPython('_lilypad_reset()');
    }
    const after = readTree(FS, root);
    const changes: PythonResult['changes'] = [];
    for (const [path, data] of after) {
      const old = before.get(path);
      if (!old || !sameBytes(old, data)) changes.push([path, data]);
    }
    for (const path of before.keys()) if (!after.has(path)) changes.push([path, null]);
    return { exitCode, output: this.output, changes };
  }
}

type FileSystem = PyodideAPI['FS'];

/** Makes `root` hold exactly `files` (caches aside). */
function syncTree(FS: FileSystem, root: string, files: Map<string, Uint8Array>) {
  FS.mkdirTree(root);
  for (const [path] of readTree(FS, root)) {
    if (!files.has(path)) FS.unlink(`${root}/${path}`);
  }
  for (const [path, data] of files) {
    const full = `${root}/${path}`;
    FS.mkdirTree(full.slice(0, full.lastIndexOf('/')));
    FS.writeFile(full, data);
  }
}

function readTree(FS: FileSystem, root: string): Map<string, Uint8Array> {
  const out = new Map<string, Uint8Array>();
  const walk = (dir: string, prefix: string) => {
    for (const name of FS.readdir(dir) as string[]) {
      if (name === '.' || name === '..' || SKIPPED.has(name)) continue;
      const full = `${dir}/${name}`;
      const mode = FS.stat(full).mode;
      if (FS.isDir(mode)) walk(full, `${prefix}${name}/`);
      else if (FS.isFile(mode)) out.set(`${prefix}${name}`, FS.readFile(full) as Uint8Array);
    }
  };
  walk(root, '');
  return out;
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
