// The interop tests' Apache Curator peer (`test-support/src/curator.rs` compiles and starts
// it): Curator's InterProcessMutex on a ZooKeeper path, the lock distlock's plain lock on
// ZooKeeper shares — or a side of its InterProcessReadWriteLock, which distlock's read/write
// lock shares with `?recipe=rwlock`.
//
// Usage: java -cp <curator jars>:<this class> CuratorLock <connect> <session ms> <path> <mode> …
//   hold              acquire (waiting as long as it takes), print "ACQUIRED <node>", hold
//                     until a line (or the end) on stdin, release, print "RELEASED"
//   increment <file> <n>
//                     n times: acquire, read the number in <file>, pause 2 ms, write it + 1,
//                     release; print "DONE"
//   read-hold, write-hold, write-increment <file> <n>
//                     the same with the read or the write side of InterProcessReadWriteLock
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.retry.RetryOneTime;

public class CuratorLock {
    public static void main(String[] args) throws Exception {
        String connect = args[0];
        int sessionMs = Integer.parseInt(args[1]);
        String path = args[2];
        String mode = args[3];
        CuratorFramework client = CuratorFrameworkFactory.newClient(connect, sessionMs, 15_000, new RetryOneTime(500));
        client.start();
        client.blockUntilConnected();
        InterProcessLock mutex;
        if (mode.startsWith("read-")) {
            mutex = new InterProcessReadWriteLock(client, path).readLock();
            mode = mode.substring(5);
        } else if (mode.startsWith("write-")) {
            mutex = new InterProcessReadWriteLock(client, path).writeLock();
            mode = mode.substring(6);
        } else {
            mutex = new InterProcessMutex(client, path);
        }
        switch (mode) {
            case "hold": {
                mutex.acquire();
                String node = "";
                for (String n : ((InterProcessMutex) mutex).getParticipantNodes()) {
                    node = n;
                    break;
                }
                System.out.println("ACQUIRED " + node);
                System.out.flush();
                new BufferedReader(new InputStreamReader(System.in)).readLine();
                mutex.release();
                System.out.println("RELEASED");
                System.out.flush();
                break;
            }
            case "increment": {
                Path file = Paths.get(args[4]);
                int n = Integer.parseInt(args[5]);
                for (int i = 0; i < n; i++) {
                    mutex.acquire();
                    try {
                        String text = new String(Files.readAllBytes(file), StandardCharsets.UTF_8).trim();
                        long value = text.isEmpty() ? 0 : Long.parseLong(text);
                        Thread.sleep(2);
                        Files.write(file, Long.toString(value + 1).getBytes(StandardCharsets.UTF_8));
                    } finally {
                        mutex.release();
                    }
                }
                System.out.println("DONE");
                System.out.flush();
                break;
            }
            default:
                System.err.println("unknown mode " + mode);
                System.exit(2);
        }
        client.close();
    }
}
