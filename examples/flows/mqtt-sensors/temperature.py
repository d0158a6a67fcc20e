# An MQTT device's reading: a publish to sensors/<room>/temp (QoS 1) is the NATS subject
# sensors.<room>.temp, which this function listens on. A reading over 30 °C is published on
# alerts.high, which MQTT subscribers of alerts/high (or alerts/#) receive.
# on: sensors.>
# next: alerts.high if result.alert
# retries: 3


def main(room: str, celsius: float):
    return {"room": room, "celsius": celsius, "alert": celsius > 30}
