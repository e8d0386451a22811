// The benchmark's Apache Curator peer (`bench/src/curator.rs` starts it): InterProcessMutex,
// the ZooKeeper lock recipe distlock implements, timed inside this JVM (System.nanoTime) so
// that neither the JVM's start-up nor the pipe to the bench is measured.
//
// Usage: java -cp <curator jars>:<this class> CuratorPeer <connect string>
// Commands, one per line on stdin, each answered by one line on stdout:
//   seq <prefix> <calls> <reused 0|1>  -> µs per acquire + release, one thread, one after another
//                                         (fresh keys <prefix><i>, or all on the key <prefix>)
//   tp <prefix> <window ms>            -> acquire + release pairs per second of 64 threads on
//                                         distinct fresh keys <prefix><thread>:<i>
//   handoff <key> <window ms>          -> "<grants/s> <p50 µs> <p99 µs>": 4 clients (sessions) x 4
//                                         threads on one key; the gaps from one client's release
//                                         to another client's next grant
//   quit
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorPeer {
    static String connect;

    static CuratorFramework client() {
        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(connect)
                .sessionTimeoutMs(30_000)
                .retryPolicy(new ExponentialBackoffRetry(100, 3))
                .build();
        client.start();
        return client;
    }

    /** A ZooKeeper path for a bench key (keys contain ':' and never '/'). */
    static String path(String key) {
        return "/bench-curator/" + key.replace('/', '_');
    }

    static void pair(InterProcessMutex mutex) throws Exception {
        if (!mutex.acquire(0, TimeUnit.MILLISECONDS)) {
            throw new IllegalStateException("an uncontended lock was busy");
        }
        mutex.release();
    }

    public static void main(String[] args) throws Exception {
        connect = args[0];
        CuratorFramework shared = client();
        shared.blockUntilConnected();
        try {
            shared.create().forPath("/bench-curator");
        } catch (org.apache.zookeeper.KeeperException.NodeExistsException e) {
            // made by an earlier run
        }
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split(" ");
            switch (w[0]) {
                case "seq": {
                    String prefix = w[1];
                    long calls = Long.parseLong(w[2]);
                    boolean reused = w[3].equals("1");
                    InterProcessMutex one = new InterProcessMutex(shared, path(prefix));
                    long t = System.nanoTime();
                    for (long i = 0; i < calls; i++) {
                        pair(reused ? one : new InterProcessMutex(shared, path(prefix + i)));
                    }
                    System.out.println((System.nanoTime() - t) / 1e3 / calls);
                    break;
                }
                case "tp": {
                    String prefix = w[1];
                    long window = Long.parseLong(w[2]);
                    AtomicBoolean stop = new AtomicBoolean();
                    AtomicLong done = new AtomicLong();
                    List<Thread> threads = new ArrayList<>();
                    for (int t = 0; t < 64; t++) {
                        final int task = t;
                        Thread thread = new Thread(() -> {
                            try {
                                for (long i = 0; !stop.get(); i++) {
                                    pair(new InterProcessMutex(shared, path(prefix + task + ":" + i)));
                                    done.incrementAndGet();
                                }
                            } catch (Exception e) {
                                e.printStackTrace();
                                System.exit(1);
                            }
                        });
                        thread.start();
                        threads.add(thread);
                    }
                    Thread.sleep(window);
                    stop.set(true);
                    for (Thread thread : threads) {
                        thread.join();
                    }
                    System.out.println(done.get() * 1000.0 / window);
                    break;
                }
                case "handoff": {
                    String key = path(w[1]);
                    long window = Long.parseLong(w[2]);
                    AtomicBoolean stop = new AtomicBoolean();
                    List<long[]> log = Collections.synchronizedList(new ArrayList<>());
                    List<Thread> threads = new ArrayList<>();
                    List<CuratorFramework> clients = new ArrayList<>();
                    for (int c = 0; c < 4; c++) {
                        CuratorFramework client = client();
                        client.blockUntilConnected();
                        clients.add(client);
                        final long owner = c;
                        for (int t = 0; t < 4; t++) {
                            InterProcessMutex mutex = new InterProcessMutex(client, key);
                            Thread thread = new Thread(() -> {
                                try {
                                    while (!stop.get()) {
                                        mutex.acquire();
                                        long acquired = System.nanoTime();
                                        long released = System.nanoTime();
                                        mutex.release();
                                        log.add(new long[] {acquired, released, owner});
                                    }
                                } catch (Exception e) {
                                    e.printStackTrace();
                                    System.exit(1);
                                }
                            });
                            threads.add(thread);
                        }
                    }
                    for (Thread thread : threads) {
                        thread.start();
                    }
                    Thread.sleep(window);
                    stop.set(true);
                    for (Thread thread : threads) {
                        thread.join();
                    }
                    for (CuratorFramework client : clients) {
                        client.close();
                    }
                    List<long[]> grants = new ArrayList<>(log);
                    grants.sort((a, b) -> Long.compare(a[0], b[0]));
                    List<Long> gaps = new ArrayList<>();
                    for (int i = 1; i < grants.size(); i++) {
                        if (grants.get(i)[2] != grants.get(i - 1)[2]) {
                            gaps.add(Math.max(0, grants.get(i)[0] - grants.get(i - 1)[1]));
                        }
                    }
                    Collections.sort(gaps);
                    double p50 = gaps.isEmpty() ? 0 : gaps.get((int) Math.round((gaps.size() - 1) * 0.5)) / 1e3;
                    double p99 = gaps.isEmpty() ? 0 : gaps.get((int) Math.round((gaps.size() - 1) * 0.99)) / 1e3;
                    System.out.println(grants.size() * 1000.0 / window + " " + p50 + " " + p99);
                    break;
                }
                case "quit":
                    shared.close();
                    return;
                default:
                    System.out.println("unknown command: " + line);
            }
            System.out.flush();
        }
        shared.close();
    }
}
