// Generated from the OpenRPC document of jsonrpc-peer web demo 0.1.0 by
// tools/openrpc-to-ts.mjs: do not edit. CI regenerates it and fails when it differs.
import type { HandlerContext, ReconnectingPeer } from 'jsonrpc-peer';

/**
 * @minItems 2
 * @maxItems 2
 */
export type SubtractPositional = [number, number];
export type SubtractResult = number;
export type SumParams = number[];
export type SumResult = number;
/**
 * @minItems 2
 * @maxItems 2
 */
export type GetDataResult = [string, number];
export type UpdateParams = unknown[];
export type NotifyHelloParams = unknown[];
export type NotifySumParams = unknown[];
/**
 * @minItems 1
 * @maxItems 1
 *
 * Items: How long the task runs: more than 0, at most 600.
 */
export type DemoLongTaskPositional = [number];
export type DemoLongTaskResult = string;
export type DemoTasksRunningResult = number;
/**
 * @minItems 2
 * @maxItems 2
 */
export type ChatSendPositional = [string, string];
/**
 * @minItems 4
 * @maxItems 4
 */
export type MetricsPositional = [number, number, number, number];
/**
 * @minItems 3
 * @maxItems 3
 */
export type ChatMessagePositional = [string, string, number];

export interface SubtractParams {
  /**
   * The number to subtract from.
   */
  minuend: number;
  /**
   * The number subtracted.
   */
  subtrahend: number;
}
export interface DemoLongTaskParams {
  /**
   * How long the task runs: more than 0, at most 600.
   */
  seconds: number;
}
/**
 * `demo.ask_browser`'s answer: the page's own description and the round trip's time.
 */
export interface DemoAskBrowserResult {
  /**
   * What the page answered.
   */
  answer: UiDescription;
  /**
   * The method the server called on the page.
   */
  asked: string;
  /**
   * From the server's call to the page's answer.
   */
  elapsed_ms: number;
}
/**
 * What the page says about itself when the server asks.
 */
export interface UiDescription {
  /**
   * `navigator.language`.
   */
  language: string;
  /**
   * The page's clock, ISO 8601.
   */
  time: string;
  /**
   * `navigator.userAgent`.
   */
  userAgent: string;
  /**
   * The window's size.
   */
  viewport: Viewport;
}
/**
 * The page's window, as `ui.describe` reports it.
 */
export interface Viewport {
  /**
   * CSS pixels.
   */
  height: number;
  /**
   * CSS pixels.
   */
  width: number;
}
export interface ChatSendParams {
  /**
   * 1 to 40 characters.
   */
  name: string;
  /**
   * 1 to 500 characters.
   */
  text: string;
}
/**
 * How many pages a chat line reached.
 */
export interface ChatSendResult {
  /**
   * Pages the line was queued for.
   */
  delivered: number;
}
/**
 * What the page says about itself when the server asks.
 */
export interface UiDescribeResult {
  /**
   * `navigator.language`.
   */
  language: string;
  /**
   * The page's clock, ISO 8601.
   */
  time: string;
  /**
   * `navigator.userAgent`.
   */
  userAgent: string;
  /**
   * The window's size.
   */
  viewport: Viewport;
}
export interface MetricsParams {
  /**
   * Counts pushes since the server started.
   */
  seq: number;
  /**
   * The server's clock, milliseconds since 1970.
   */
  time_ms: number;
  /**
   * Pages connected now.
   */
  connections: number;
  /**
   * A wave with some noise.
   */
  value: number;
}
export interface ChatMessageParams {
  /**
   * Who wrote it.
   */
  name: string;
  /**
   * What they wrote.
   */
  text: string;
  /**
   * The server's clock when it arrived, milliseconds since 1970.
   */
  at_ms: number;
}

/** Methods the server serves: the page calls them. */
export interface ServerMethods {
  "subtract": { params: SubtractParams | SubtractPositional; result: SubtractResult };
  "sum": { params: SumParams; result: SumResult };
  "get_data": { params: [] | undefined; result: GetDataResult };
  "demo.long_task": { params: DemoLongTaskParams | DemoLongTaskPositional; result: DemoLongTaskResult };
  "demo.tasks_running": { params: [] | undefined; result: DemoTasksRunningResult };
  "demo.ask_browser": { params: [] | undefined; result: DemoAskBrowserResult };
  "chat.send": { params: ChatSendParams | ChatSendPositional; result: ChatSendResult };
}
/** Methods the page serves (`x-implemented-by: client`): the server calls them. */
export interface ClientMethods {
  "ui.describe": { params: [] | undefined; result: UiDescribeResult };
}
/** Notifications the server sends: the page handles them. */
export interface ServerNotifications {
  "metrics": MetricsParams | MetricsPositional;
  "chat.message": ChatMessageParams | ChatMessagePositional;
}
/** Notifications the page sends: the server handles them. */
export interface ClientNotifications {
  "update": UpdateParams;
  "notify_hello": NotifyHelloParams;
  "notify_sum": NotifySumParams;
}

type CallOptions = Parameters<ReconnectingPeer['call']>[2];
type Args<P> = [] extends P ? [params?: P, options?: CallOptions] : undefined extends P ? [params?: P, options?: CallOptions] : [params: P, options?: CallOptions];
type Answer<R> = R | Promise<R>;

/** The page's peer seen through this API: only described names, with their types. */
export interface TypedPeer {
  call<M extends keyof ServerMethods>(method: M, ...args: Args<ServerMethods[M]['params']>): Promise<ServerMethods[M]['result']>;
  notify<N extends keyof ClientNotifications>(method: N, ...args: Args<ClientNotifications[N]>): Promise<void>;
  method<M extends keyof ClientMethods>(name: M, handler: (cx: HandlerContext, params: ClientMethods[M]['params']) => Answer<ClientMethods[M]['result']>): this;
  notification<N extends keyof ServerNotifications>(name: N, handler: (cx: HandlerContext, params: ServerNotifications[N]) => unknown): this;
}

/** A ReconnectingPeer typed by this API: cast what reconnecting() returns to it. */
export type DemoPeer = TypedPeer & Omit<ReconnectingPeer, 'call' | 'notify' | 'method' | 'notification'>;
