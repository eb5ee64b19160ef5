/**
 * One kernel's link to devinspect: the comm with target "devinspect" (opened by either end),
 * what the kernel last sent, and what state the link is in.
 */
import { Kernel, KernelMessage } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

export const TARGET = 'devinspect';

export interface IDeviceMemory {
  device: string;
  allocated: number | null;
  reserved: number | null;
  peak: number | null;
}

export interface IMemoryMessage {
  type: 'memory';
  devices: IDeviceMemory[];
  history: { count: number | null; allocated: { [device: string]: number | null } }[];
  stale: boolean;
  count: number | null;
}

export interface IFinding {
  index: number;
  severity: 'error' | 'warning' | 'hint';
  subject: string;
  message: string;
  fix: string | null;
  can_apply: boolean;
}

export interface ITensor {
  name: string;
  device: string;
  dtype: string | null;
  shape: number[] | null;
  bytes: number | null;
  kind: string;
}

export interface IScanMessage {
  type: 'scan';
  findings: IFinding[];
  tensors: ITensor[];
  matching: number;
  total: number;
  filter: string;
  error?: string;
  ms?: number;
}

export interface ICellEdit {
  cell_id: string;
  count: number;
  old: string;
  new: string;
  lines: number[];
}

export interface IEditMessage {
  type: 'edit';
  edit_id: string;
  cells: ICellEdit[];
}

/**
 * probing: asking the kernel; absent: devinspect is not loaded there; live: linked;
 * restarted: the kernel restarted (nothing it said before holds); dead: the kernel is gone.
 */
export type LinkState = 'probing' | 'absent' | 'live' | 'restarted' | 'dead';

/** What a link does with an edit the kernel sends: the ids of the cells it changed. */
export type EditHandler = (link: KernelLink, edit: IEditMessage) => string[];

export class KernelLink {
  constructor(kernel: Kernel.IKernelConnection, onEdit: EditHandler) {
    this.kernel = kernel;
    this._onEdit = onEdit;
    kernel.registerCommTarget(TARGET, (comm, msg) => this._adopt(comm, msg));
    kernel.statusChanged.connect(this._onStatus, this);
    kernel.disposed.connect(() => {
      this.state = 'dead';
      this._changed.emit();
    });
    if (kernel.status === 'idle' || kernel.status === 'busy') {
      this.probe();
    } else {
      this._probeWhenIdle = true;
    }
  }

  readonly kernel: Kernel.IKernelConnection;
  state: LinkState = 'probing';
  /** The kernel restarted since this link was made, and devinspect is not linked again yet. */
  restarted = false;
  memory: IMemoryMessage | null = null;
  scan: IScanMessage | null = null;
  /** What Apply fix in the panel did, by finding index. */
  applied = new Map<number, { ok: boolean; message: string }>();
  filter = '';
  /** Whether a view shows the findings and tensors (then they are asked for after each cell). */
  wanted = false;

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** Open a comm to the kernel: a kernel with devinspect loaded answers; one without closes it. */
  probe(): void {
    this._probeWhenIdle = false;
    let comm: Kernel.IComm;
    try {
      comm = this.kernel.createComm(TARGET);
    } catch {
      return;
    }
    this._listen(comm);
    this.state = this.comm ? this.state : 'probing';
    void comm.open({ type: 'hello' });
    this._probing = comm;
    this._changed.emit();
  }

  /** Load devinspect in this kernel (%load_ext devinspect): it opens the comm back. */
  load(): void {
    this.kernel.requestExecute({ code: '%load_ext devinspect', silent: false, store_history: false });
  }

  requestScan(): void {
    if (!this.comm || this._scanInFlight) {
      this._scanAgain = this._scanInFlight;
      return;
    }
    this._scanInFlight = true;
    void this.comm.send({ type: 'scan', filter: this.filter });
  }

  apply(index: number): void {
    if (this.comm) {
      this.applied.set(index, { ok: true, message: 'applying…' });
      void this.comm.send({ type: 'apply', index });
      this._changed.emit();
    }
  }

  /** Ask for the walk once the kernel has stayed idle a moment: cells queued by Run All go first. */
  private _scanWhenIdle(): void {
    window.clearTimeout(this._scanTimer);
    this._scanTimer = window.setTimeout(() => {
      if (this.kernel.status === 'idle') {
        this.requestScan();
      } else if (this.state === 'live') {
        this._scanWhenIdle();
      }
    }, 200);
  }

  /** Whether a finding is open (the status bar turns amber). */
  get hasFindings(): boolean {
    return this.state === 'live' && !!this.scan && this.scan.findings.length > 0;
  }

  private _adopt(comm: Kernel.IComm, msg: KernelMessage.ICommOpenMsg): void {
    this._listen(comm);
    void comm.send({ type: 'hello' });
    this._handle(comm, msg.content.data as any);
  }

  private _listen(comm: Kernel.IComm): void {
    comm.onMsg = msg => this._handle(comm, msg.content.data as any);
    comm.onClose = () => {
      if (this._probing === comm) {
        this._probing = null;
      }
      if (this.comm === comm) {
        this.comm = null;
        this.memory = null;
        this.scan = null;
      }
      if (!this.comm && this.state !== 'restarted' && this.state !== 'dead') {
        this.state = 'absent';
      }
      this._changed.emit();
    };
  }

  private _handle(comm: Kernel.IComm, data: any): void {
    if (!data || typeof data.type !== 'string') {
      return;
    }
    if (this.comm !== comm) {
      // The newest comm that speaks is the one this page uses; an older one stays open, unused.
      this.comm = comm;
    }
    this.state = 'live';
    this.restarted = false;
    switch (data.type) {
      case 'memory':
        this.memory = data as IMemoryMessage;
        if (data.stale && (this.wanted || this._scanCheap)) {
          this._scanWhenIdle();
        }
        break;
      case 'scan':
        this.scan = data as IScanMessage;
        this._scanCheap = (data.ms ?? 0) < 100;
        this._scanInFlight = false;
        if (this._scanAgain) {
          this._scanAgain = false;
          this.requestScan();
        }
        break;
      case 'applied':
        this.applied.set(data.index, { ok: !!data.ok, message: String(data.message) });
        break;
      case 'edit': {
        const done = this._onEdit(this, data as IEditMessage);
        void comm.send({ type: 'edited', edit_id: data.edit_id, cells: done });
        break;
      }
      default:
        break;
    }
    this._changed.emit();
  }

  private _onStatus(_kernel: Kernel.IKernelConnection, status: Kernel.Status): void {
    if (status === 'restarting' || status === 'autorestarting') {
      this.state = 'restarted';
      this.restarted = true;
      this.comm = null;
      this._probing = null;
      this.memory = null;
      this.scan = null;
      this.applied.clear();
      this._scanInFlight = false;
      this._probeWhenIdle = true;
      this._changed.emit();
    } else if (status === 'dead') {
      this.state = 'dead';
      this._changed.emit();
    } else if (status === 'idle' && this._probeWhenIdle) {
      // After a restart the targets are registered again (the kernel's comms are gone).
      this.kernel.registerCommTarget(TARGET, (comm, msg) => this._adopt(comm, msg));
      this.probe();
    }
  }

  comm: Kernel.IComm | null = null;
  private _probing: Kernel.IComm | null = null;
  private _probeWhenIdle = false;
  private _scanInFlight = false;
  private _scanAgain = false;
  private _scanCheap = true;
  private _scanTimer = 0;
  private _onEdit: EditHandler;
  private _changed = new Signal<this, void>(this);
}

/** Bytes as people read them: 1.2 GiB, 512 MiB, 3.0 KiB, 12 B. */
export function bytes(value: number | null | undefined): string {
  if (value === null || value === undefined) {
    return '–';
  }
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = value;
  let unit = 0;
  while (v >= 1024 && unit < units.length - 1) {
    v /= 1024;
    unit++;
  }
  return unit === 0 ? `${v} B` : `${v.toFixed(1)} ${units[unit]}`;
}
